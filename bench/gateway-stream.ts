// The object streams of gateway.bench.ts: a large object PUT (known length, then chunked) and GET
// streamed through the gateway, generated and checked on the fly in this process, with the gateway's
// RSS while it streamed. The gateway must pass the body on as it arrives, never holding it whole.
import { createHash, type Hash } from "node:crypto";
import { once } from "node:events";
import { Agent, request, type IncomingMessage } from "node:http";
import { emit } from "./measure.js";
import type { ServerProcess } from "./server-process.js";

const MB = 1024 * 1024;
const PATH = "/v1/objects/bench/big";
type Length = "known" | "unknown";

/** PUT `bytes` of `chunk` repeated, with a content-length or chunked; `digest` takes what was sent. */
async function put(port: number, key: string, length: Length, bytes: number, chunk: Buffer, digest: Hash): Promise<void> {
  const answer = await new Promise<IncomingMessage>((resolve, reject) => {
    const headers: Record<string, string | number> = {
      authorization: `Bearer ${key}`,
      "fencing-token": "1",
      "content-type": "application/octet-stream",
    };
    if (length === "known") headers["content-length"] = bytes;
    else headers["transfer-encoding"] = "chunked";
    const req = request({ host: "127.0.0.1", port, method: "PUT", path: PATH, headers }, resolve);
    req.on("error", reject);
    void (async () => {
      for (let sent = 0; sent < bytes; sent += chunk.length) {
        const part = chunk.subarray(0, Math.min(chunk.length, bytes - sent));
        digest.update(part);
        if (!req.write(part)) await once(req, "drain");
      }
      req.end();
    })().catch(reject);
  });
  answer.resume();
  await once(answer, "end");
  if (answer.statusCode !== 200) throw new Error(`stream PUT answered ${answer.statusCode}`);
}

/** GET the object back; the number of bytes received and their sha256. */
async function get(port: number, key: string, agent: Agent): Promise<{ received: number; sha256: string }> {
  const got = await new Promise<IncomingMessage>((resolve, reject) => {
    const req = request(
      { host: "127.0.0.1", port, method: "GET", path: PATH, headers: { authorization: `Bearer ${key}` }, agent },
      resolve,
    );
    req.on("error", reject);
    req.end();
  });
  const check = createHash("sha256");
  let received = 0;
  for await (const part of got) {
    received += (part as Buffer).length;
    check.update(part as Buffer);
  }
  if (got.statusCode !== 200) throw new Error(`stream GET answered ${got.statusCode}`);
  return { received, sha256: check.digest("hex") };
}

/**
 * Each of `gateways` (named by what it is: after the writes, fresh) takes a PUT of `bytes` of known
 * length and one chunked, each read back with a GET and checked. One line a stream, its goal beside
 * it: the gateway's peak RSS while it streamed.
 */
export async function streamLines(gateways: readonly (readonly [string, ServerProcess])[], key: string, bytes: number): Promise<void> {
  const agent = new Agent({ keepAlive: true });
  const chunk = Buffer.alloc(MB);
  for (let i = 0; i < chunk.length; i++) chunk[i] = (i * 131) % 251;
  try {
    for (const [gatewayIs, gw] of gateways)
      for (const length of ["known", "unknown"] as const) {
        const streamed = (op: "put" | "get", n: number, seconds: number, rss: Record<string, unknown>): void =>
          emit({
            bench: "gateway-object-stream",
            op,
            length,
            gatewayIs,
            bytes: n,
            seconds: Number(seconds.toFixed(2)),
            mbPerSec: Number((n / MB / seconds).toFixed(1)),
            ...rss,
            goalMaxRssMb: 200,
          });
        gw.resetPeak();
        const before = gw.rssMb().now;
        const digest = createHash("sha256");
        const t0 = performance.now();
        await put(gw.port, key, length, bytes, chunk, digest);
        streamed("put", bytes, (performance.now() - t0) / 1000, { gatewayRssBeforeMb: before, gatewayPeakRssMb: gw.rssMb().peak });
        gw.resetPeak();
        const t1 = performance.now();
        const { received, sha256 } = await get(gw.port, key, agent);
        const getSeconds = (performance.now() - t1) / 1000;
        if (received !== bytes || sha256 !== digest.digest("hex"))
          throw new Error(`GET returned ${received} bytes that differ from what was put`);
        streamed("get", received, getSeconds, { gatewayPeakRssMb: gw.rssMb().peak, bodyVerified: "sha256" });
      }
  } finally {
    agent.destroy();
  }
}
