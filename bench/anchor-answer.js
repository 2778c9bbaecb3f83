// The floor under overload.bench.ts's gateway: bare node:http reading each write's body whole and
// answering at once, with no lock, store or framework — ANCHOR_STATUS 200 (`{}`: a server with
// nothing to do) or 503 (the gateway's overloaded problem: the cheapest refusal a Node HTTP server
// can give). Prints {"msg":"listening","port":…} once it listens.
import { Buffer } from "node:buffer";
import { createServer } from "node:http";
import process from "node:process";

const STATUS = Number(process.env.ANCHOR_STATUS ?? 200);
const REFUSE = STATUS === 503;
const BODY = REFUSE
  ? JSON.stringify({ type: "/problems/overloaded", title: "Overloaded", status: 503, detail: "the anchor answers every write so" })
  : "{}";
const HEADERS = {
  "Content-Type": REFUSE ? "application/problem+json; charset=utf-8" : "application/json",
  "Content-Length": Buffer.byteLength(BODY),
  ...(REFUSE ? { "Retry-After": "1" } : {}),
};

const server = createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    res.writeHead(STATUS, HEADERS);
    res.end(BODY);
  });
});
// The gateway's keep-alive timeout and listen backlog: the same connections, the same accept queue.
server.keepAliveTimeout = 65_000;
server.listen(0, "127.0.0.1", 4_096, () => process.stdout.write(`${JSON.stringify({ msg: "listening", port: server.address().port })}\n`));
process.once("SIGTERM", () => {
  server.close();
  server.closeAllConnections();
});
