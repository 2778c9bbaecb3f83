// The floor under any Node HTTP server of these writes: the same bearer check and upsert as the express
// anchor behind bare node:http, no framework — the body read whole and JSON.parse'd, a JSON answer.
import { Buffer } from "node:buffer";
import { createServer } from "node:http";
import { bearer, listen, upsert } from "./anchor-pg.js";

const PREFIX = "/v1/records/";

function answer(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text) });
  res.end(text);
}

const server = createServer((req, res) => {
  if (req.method !== "PUT" || !req.url.startsWith(PREFIX)) return answer(res, 404, { error: "not found" });
  if (req.headers.authorization !== bearer) return answer(res, 401, { error: "unauthorized" });
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    let value;
    try {
      value = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      return answer(res, 400, { error: "invalid JSON" });
    }
    upsert(decodeURIComponent(req.url.slice(PREFIX.length)), value).then(
      (version) => answer(res, 200, { version }),
      () => answer(res, 500, { error: "internal" }),
    );
  });
});
listen(server);
