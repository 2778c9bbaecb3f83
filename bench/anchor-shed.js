// The simplest shedding server of these writes: anchor-node-http.js's writes (bare node:http, the
// bearer check, one upsert) and a limit on the writes in flight (ANCHOR_LIMIT, by default the pool's
// size): a write over it is refused at once, 503 overloaded with Retry-After, its body read and dropped.
// No queue, no fairness, no framework: what a minimal shedding Node server gets from this machine, its
// generators and node-postgres under more writes than it can take (overload-anchor-shed.ts).
import { Buffer } from "node:buffer";
import { createServer } from "node:http";
import process from "node:process";
import { handleWrite, listen } from "./anchor-pg.js";

const LIMIT = Number(process.env.ANCHOR_LIMIT ?? process.env.ANCHOR_POOL_SIZE);
const REFUSAL = JSON.stringify({ type: "/problems/overloaded", title: "Overloaded", status: 503, detail: "too many writes in flight" });
const REFUSAL_HEADERS = {
  "Content-Type": "application/problem+json; charset=utf-8",
  "Content-Length": Buffer.byteLength(REFUSAL),
  "Retry-After": "1",
};
let inFlight = 0;

const server = createServer((req, res) => {
  if (inFlight >= LIMIT) {
    req.resume();
    req.on("end", () => {
      res.writeHead(503, REFUSAL_HEADERS);
      res.end(REFUSAL);
    });
    return;
  }
  inFlight++;
  void handleWrite(req, res).finally(() => inFlight--);
});
listen(server);
