// The simplest shedding server of these writes: bare node:http, the same bearer check and upsert as
// anchor-node-http.js, and a limit on the writes in flight (ANCHOR_LIMIT, by default the pool's size):
// a write over it is refused at once, 503 overloaded with Retry-After, its body read and dropped.
// No queue, no fairness, no framework: what any Node server that sheds gets from this machine, its
// generators and node-postgres under more writes than it can take (overload-anchor-shed.ts).
import { Buffer } from "node:buffer";
import { createServer } from "node:http";
import process from "node:process";
import { bearer, listen, upsert } from "./anchor-pg.js";

const PREFIX = "/v1/records/";
const LIMIT = Number(process.env.ANCHOR_LIMIT ?? process.env.ANCHOR_POOL_SIZE);
const REFUSAL = JSON.stringify({ type: "/problems/overloaded", title: "Overloaded", status: 503, detail: "too many writes in flight" });
const REFUSAL_HEADERS = {
  "Content-Type": "application/problem+json; charset=utf-8",
  "Content-Length": Buffer.byteLength(REFUSAL),
  "Retry-After": "1",
};
let inFlight = 0;

function answer(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text) });
  res.end(text);
}

const server = createServer((req, res) => {
  if (req.method !== "PUT" || !req.url.startsWith(PREFIX)) return answer(res, 404, { error: "not found" });
  if (req.headers.authorization !== bearer) return answer(res, 401, { error: "unauthorized" });
  if (inFlight >= LIMIT) {
    req.resume();
    req.on("end", () => {
      res.writeHead(503, REFUSAL_HEADERS);
      res.end(REFUSAL);
    });
    return;
  }
  inFlight++;
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    let value;
    try {
      value = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      inFlight--;
      return answer(res, 400, { error: "invalid JSON" });
    }
    upsert(decodeURIComponent(req.url.slice(PREFIX.length)), value)
      .then(
        (version) => answer(res, 200, { version }),
        () => answer(res, 500, { error: "internal" }),
      )
      .finally(() => inFlight--);
  });
});
listen(server);
