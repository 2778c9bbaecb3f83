import { request } from "node:http";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  bearer,
  KEYS,
  runGateway,
  snapshot,
  startBackends,
  writeHeaders,
  type Backends,
  type RunningGateway,
  recordsSchema,
} from "./test-support.js";

/**
 * A client that has gone writes nothing that was not already sent: every store call of a request is
 * given the client-gone signal (http/client-gone.ts), so a request still waiting for a pool
 * connection when its client leaves ends there — also a PUT or DELETE with If-Match, whose store
 * call once ignored the signal and wrote as soon as a connection freed. The gateway's pool has one
 * connection, which the test holds while each client leaves.
 */

let backends: Backends;
let gw: RunningGateway;
let pool: pg.Pool;
let schema: string | undefined;

beforeAll(async () => {
  backends = await startBackends({ postgres: true, poolMax: 1 });
  pool = backends.pool!;
  // A deadline far beyond the test's waits: a call that ends, ends at the client's leaving, never at its deadline.
  const options = backends.gatewayOptions({ storeTimeoutMs: 60_000 });
  schema = recordsSchema(options);
  gw = await runGateway(options);
}, 120_000);

afterAll(async () => {
  await gw?.close();
  await backends?.stop();
});

/** How many calls into the records store for `op` have ended: the histogram observes each call as it settles. */
async function callsEnded(op: string): Promise<number> {
  const metric = await gw.gateway.metrics.registry.getSingleMetric("fenced_gateway_store_duration_seconds")?.get();
  // A histogram's values carry their series' name (prom-client's MetricValueWithName); its _count is the calls ended.
  const values = (metric?.values ?? []) as { value: number; labels: Record<string, unknown>; metricName?: string }[];
  const counts = values.filter((v) => v.metricName?.endsWith("_count") === true && v.labels.store === "records" && v.labels.op === op);
  return counts.reduce((sum, v) => sum + v.value, 0); // every outcome
}

/** Sends a whole request and leaves without reading the answer, once the gateway is waiting for a pool connection. */
async function sendAndLeave(method: string, path: string, headers: Record<string, string>, body?: string): Promise<void> {
  const waitingBefore = pool.waitingCount;
  const req = request({
    host: "127.0.0.1",
    port: gw.serving.port,
    method,
    path,
    headers: {
      ...headers,
      ...(body === undefined ? {} : { "content-type": "application/json", "content-length": Buffer.byteLength(body) }),
    },
  });
  let answered = false;
  req.on("response", () => (answered = true));
  req.on("error", () => undefined);
  req.end(body);
  await expect.poll(() => answered || pool.waitingCount > waitingBefore, { timeout: 5_000, interval: 5 }).toBe(true);
  expect(answered, "the gateway answered before it needed a connection").toBe(false);
  expect(pool.waitingCount).toBeGreaterThan(waitingBefore);
  req.destroy();
}

const put = (key: string, token: bigint, ifMatch?: string): Promise<{ status: number; etag: string }> =>
  gw.client
    .send({
      method: "PUT",
      path: `/v1/records/${key}`,
      headers: {
        ...writeHeaders(KEYS.admin, token, ifMatch === undefined ? {} : { "if-match": ifMatch }),
        "content-type": "application/json",
      },
      body: '{"v":1}',
    })
    .then((res) => ({ status: res.status, etag: String(res.headers.etag) }));

describe("a client that leaves while its request waits for a pool connection", () => {
  // Each case writes a key of its own, so that a case that fails leaves the others' starting point alone.
  const cases: [string, string, (key: string, etag: string) => [string, string, Record<string, string>, string?]][] = [
    [
      "PUT with If-Match",
      "put",
      (key, etag) => ["PUT", `/v1/records/${key}`, writeHeaders(KEYS.admin, 2n, { "if-match": etag }), '{"v":2}'],
    ],
    ["DELETE with If-Match", "delete", (key, etag) => ["DELETE", `/v1/records/${key}`, writeHeaders(KEYS.admin, 2n, { "if-match": etag })]],
    ["PUT", "put", (key) => ["PUT", `/v1/records/${key}`, writeHeaders(KEYS.admin, 2n), '{"v":2}']],
    ["DELETE", "delete", (key) => ["DELETE", `/v1/records/${key}`, writeHeaders(KEYS.admin, 2n)]],
    ["GET", "get", (key) => ["GET", `/v1/records/${key}`, bearer(KEYS.admin)]],
  ];
  for (const [name, op, ask] of cases) {
    const key = `gone/${name.replaceAll(" ", "-")}`;
    it(`${name}: the store call ends when the client leaves, and nothing is written once the connection frees`, async () => {
      const written = await put(key, 1n);
      expect(written.status).toBe(200);
      const before = await snapshot(pool, schema, undefined, undefined);
      const ended = await callsEnded(op);
      const held = await pool.connect();
      try {
        const [method, path, headers, body] = ask(key, written.etag);
        await sendAndLeave(method, path, headers, body);
        // The store call settles at the client's leaving (its abort), with the connection still held.
        await expect.poll(() => callsEnded(op), { timeout: 5_000, interval: 5 }).toBe(ended + 1);
      } finally {
        held.release();
      }
      // The pool at rest: whatever still waited for the connection has had it and given it back.
      await expect
        .poll(() => ({ waiting: pool.waitingCount, idle: pool.idleCount }), { timeout: 5_000, interval: 5 })
        .toEqual({ waiting: 0, idle: 1 });
      expect(await snapshot(pool, schema, undefined, undefined)).toBe(before);
    });
  }
});
