import { createServer } from "node:net";
import { Redis } from "ioredis";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { PgPool } from "@fenced/store/postgres";
import { createGateway } from "./index.js";
import { serve } from "./http/server.js";
import { bearer, httpClient, KEYS, runGateway, startBackends, writeHeaders, type Backends, type RunningGateway } from "./test-support.js";

/**
 * One log line per request, carrying its request id: a refusal the gateway expects (a stale token, a
 * lock whose nodes do not answer) is a warning with the error's code and detail and no stack; a
 * backend's own error answer, which an operator must look at, is an error with the stack.
 */

type Line = Record<string, unknown>;
const lines: Line[] = [];
const logger = pino({ level: "info" }, { write: (line: string) => void lines.push(JSON.parse(line) as Line) });

/** The lines of one request, once its line is written (when its response is over). */
async function linesOf(requestId: unknown): Promise<Line[]> {
  while (!lines.some((l) => l.requestId === requestId && typeof l.status === "number")) await new Promise((r) => setImmediate(r));
  return lines.filter((l) => l.requestId === requestId);
}

/** A port nothing listens on: its connections are refused. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

let backends: Backends;
let gw: RunningGateway;
const dead: Redis[] = [];

beforeAll(async () => {
  backends = await startBackends({ postgres: true });
  for (let i = 0; i < 3; i++) {
    const redis = new Redis(await closedPort(), "127.0.0.1", { retryStrategy: () => 50, maxRetriesPerRequest: 0 });
    redis.on("error", () => undefined);
    dead.push(redis);
  }
  gw = await runGateway(backends.gatewayOptions({ logger, leases: { clients: dead, redlock: { nodeTimeoutMs: 200 } } }));
});
afterAll(async () => {
  await gw?.close();
  for (const redis of dead) redis.disconnect();
  await backends?.stop();
});

describe("the request's log line", () => {
  it("a stale token: one warning with the request id, the error's code and detail, no stack", async () => {
    const put = (token: number) =>
      gw.client.send({
        method: "PUT",
        path: "/v1/records/logs/a",
        headers: { ...writeHeaders(KEYS.admin, BigInt(token)), "content-type": "application/json" },
        body: "1",
      });
    expect((await put(5)).status).toBe(200);
    const stale = await put(4);
    expect(stale.status).toBe(409);
    const logged = await linesOf(stale.headers["x-request-id"]);
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: 40, msg: "request", status: 409, problem: "stale-token", code: "STALE_TOKEN" });
    expect(String(logged[0]?.detail)).toContain("logs/a");
    expect(logged[0]).not.toHaveProperty("err");
    expect(JSON.stringify(logged[0])).not.toContain("    at ");
  });

  it("too few lock nodes answered (503): one warning, no stack", async () => {
    const lease = await gw.client.json("POST", "/v1/leases", { resource: "logs/r", ttlMs: 1_000 }, bearer(KEYS.admin));
    expect(lease.status, lease.text()).toBe(503);
    const logged = await linesOf(lease.headers["x-request-id"]);
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: 40, status: 503, problem: "unavailable" });
    // Every node's outcome, by index (a node the round no longer waited for once no quorum was possible: unanswered).
    const outcome = "(refused ECONNREFUSED|unanswered)";
    expect(logged[0]?.detail).toMatch(
      new RegExp(`^too few lock nodes answered: node 0: ${outcome}; node 1: ${outcome}; node 2: ${outcome}$`),
    );
    expect(logged[0]?.detail).toContain("refused ECONNREFUSED");
    expect(lease.json()).toMatchObject({ detail: logged[0]?.detail });
    expect(logged[0]).not.toHaveProperty("err");
  });

  it("a backend's own error answer (502): one error line with the stack and the request id", async () => {
    // A pool whose server refuses every statement with permission denied (SQLSTATE 42501): no store classifies it.
    const refused = () =>
      Promise.reject(Object.assign(new Error("permission denied for table records"), { code: "42501", severity: "ERROR" }));
    const refusing = {
      query: refused,
      connect: () => Promise.resolve({ query: refused, release: () => undefined }),
    } as unknown as PgPool;
    // Not prepared (its migrate() would be refused too): served as it is.
    const other = createGateway(backends.gatewayOptions({ logger, records: { pool: refusing as never } }));
    const serving = await serve(other.app, { port: 0 });
    const client = httpClient(serving.port);
    try {
      const read = await client.send({ method: "GET", path: "/v1/records/logs/b", headers: bearer(KEYS.admin) });
      expect(read.status, read.text()).toBe(502);
      expect(read.json()).toMatchObject({ type: "/problems/backend-error", requestId: read.headers["x-request-id"] });
      const logged = await linesOf(read.headers["x-request-id"]);
      expect(logged).toHaveLength(1);
      expect(logged[0]).toMatchObject({ level: 50, msg: "request failed", status: 502, problem: "backend-error" });
      expect((logged[0]?.err as { stack?: string }).stack).toContain("    at ");
    } finally {
      client.close();
      await serving.drain(1_000);
    }
  });
});
