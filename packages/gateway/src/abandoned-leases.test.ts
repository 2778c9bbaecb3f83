import { request as httpRequest } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { pino } from "pino";
import { LockNotAcquiredError, Redlock } from "@fenced/lock";
import { startPostgres, startRedisNodes, type RedisNodes, type ServerFaults } from "@fenced/servers";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGateway, type Gateway } from "./index.js";
import { serve, type Serving } from "./http/server.js";
import { API_KEYS, bearer, FENCE_KEYS, httpClient, KEYS, type HttpClient } from "./test-support.js";

/**
 * A lease the gateway obtains after its client has gone (the client's own timeout, a cut connection)
 * is released at once, not left to hold the resource for its TTL: nobody holds its lease id.
 */
const TTL_MS = 60_000;

let redis: RedisNodes;
let postgres: { readonly url: string; readonly faults: ServerFaults; stop(): Promise<void> };
let clients: Redis[];
let pool: pg.Pool;
let gateway: Gateway;
let serving: Serving;
let client: HttpClient;
/** A lock client of the test's own: tells whether the resource is free right now (no retries). */
let probe: Redlock;

beforeAll(async () => {
  [redis, postgres] = await Promise.all([startRedisNodes(3), startPostgres({ faults: true })]);
  clients = redis.urls.map((url) => new Redis(url).on("error", () => undefined));
  pool = new pg.Pool({ connectionString: postgres.url, max: 4 });
  pool.on("error", () => undefined);
  gateway = createGateway({
    apiKeys: API_KEYS,
    fenceKeys: FENCE_KEYS,
    logger: pino({ level: "silent" }),
    defaultMetrics: false,
    storeTimeoutMs: 10_000,
    records: { pool, schema: "abandoned" },
    // Retries inside the gateway, for longer than the client waits.
    leases: { clients, redlock: { retryCount: 100, retryDelayMs: 100, retryJitterMs: 0 }, acquireTimeoutMs: 5_000 },
  });
  await gateway.prepare();
  serving = await serve(gateway.app);
  client = httpClient(serving.port);
  probe = new Redlock(clients, { retryCount: 0 });
}, 300_000);

afterAll(async () => {
  client?.close();
  await serving?.drain(1_000);
  for (const c of clients ?? []) c.disconnect();
  await pool?.end().catch(() => undefined);
  await Promise.allSettled([redis?.stop(), postgres?.stop()]);
}, 120_000);

/** POST /v1/leases, unanswered so far: `answered` resolves with the status, or undefined if the connection closed first. */
function post(port: number, body: unknown): { answered: Promise<number | undefined>; leave(): void } {
  const payload = JSON.stringify(body);
  const req = httpRequest({
    host: "127.0.0.1",
    port,
    method: "POST",
    path: "/v1/leases",
    headers: { ...bearer(KEYS.admin), "content-type": "application/json", "content-length": Buffer.byteLength(payload) },
  });
  const answered = new Promise<number | undefined>((resolve) => {
    req.once("response", (res) => resolve(res.statusCode ?? 0));
    req.once("close", () => resolve(undefined));
  });
  req.on("error", () => undefined);
  req.end(payload);
  return { answered, leave: () => req.destroy() };
}

/** POST /v1/leases from a client that gives up after `afterMs`: resolves once its connection is closed. */
async function leaveAfter(body: unknown, afterMs: number): Promise<void> {
  const request = post(serving.port, body);
  const first = await Promise.race([request.answered, sleep(afterMs).then(() => "waiting")]);
  expect(first, "the gateway answered before the client left").toBe("waiting");
  request.leave();
}

/** Whether a lock client that does not retry gets the resource now. */
async function freeNow(resource: string): Promise<boolean> {
  try {
    await (await probe.acquire(resource, 1_000)).release();
    return true;
  } catch (err) {
    if (err instanceof LockNotAcquiredError) return false;
    throw err;
  }
}

async function abandonedCount(): Promise<number> {
  const metric = await gateway.metrics.registry.getSingleMetric("fenced_gateway_leases_abandoned_total")?.get();
  return metric?.values.reduce((sum, v) => sum + v.value, 0) ?? 0;
}

async function hold(resource: string): Promise<string> {
  const held = await client.json("POST", "/v1/leases", { resource, ttlMs: TTL_MS }, bearer(KEYS.admin));
  expect(held.status, held.text()).toBe(201);
  return held.json<{ leaseId: string }>().leaseId;
}

async function release(leaseId: string): Promise<void> {
  expect((await client.json("POST", "/v1/leases/release", { leaseId }, bearer(KEYS.admin))).status).toBe(204);
}

describe("a lease granted after its client left is released", () => {
  it("the client gives up while the gateway retries a held lock; the holder then releases", async () => {
    const resource = "abandoned/retried";
    const before = await abandonedCount();
    const leaseId = await hold(resource);
    await leaveAfter({ resource, ttlMs: TTL_MS }, 300);
    await release(leaseId);
    // The gateway's next attempts (every 100 ms) stop with the client gone, or release what they got.
    await sleep(1_000);
    // Free by then, or soon after on a busy machine: a lease kept for the client that left would hold it for its whole TTL (60 s).
    await expect.poll(() => freeNow(resource), { timeout: 10_000 }).toBe(true);
    // Only what was granted counts as abandoned; a retry loop ended before a grant is not.
    expect(await abandonedCount()).toBeLessThanOrEqual(before + 1);
  });

  it("register: the client gives up while a store is slow to register the lease", async () => {
    const resource = "abandoned/registered";
    const before = await abandonedCount();
    postgres.faults.pause();
    try {
      await leaveAfter({ resource, ttlMs: TTL_MS, register: true }, 300);
    } finally {
      postgres.faults.resume();
    }
    // The registration completes once PostgreSQL answers again; the lease is then released.
    const deadline = Date.now() + 10_000;
    while (!(await freeNow(resource)) && Date.now() < deadline) await sleep(100);
    expect(await freeNow(resource)).toBe(true);
    expect(await abandonedCount()).toBe(before + 1);
  }, 30_000);

  it("a drain cuts the request while a store registers the lease: settled() resolves once it is released", async () => {
    const resource = "abandoned/drained";
    const before = await abandonedCount();
    // A listener of its own, so that the drain leaves the others serving.
    const draining = await serve(gateway.app);
    postgres.faults.pause();
    let request: ReturnType<typeof post>;
    try {
      request = post(draining.port, { resource, ttlMs: TTL_MS, register: true });
      await sleep(300);
      // In flight past the deadline: cut.
      expect(await draining.drain(200)).toBe(false);
      expect(await request.answered).toBeUndefined();
    } finally {
      postgres.faults.resume();
    }
    // What a stopping gateway awaits before it closes the lock's connections: the release is done by then.
    await gateway.settled();
    expect(await freeNow(resource)).toBe(true);
    expect(await abandonedCount()).toBe(before + 1);
  }, 30_000);
});
