import { performance } from "node:perf_hooks";
import { S3Client } from "@aws-sdk/client-s3";
import pg from "pg";
import { Redis } from "ioredis";
import { pino } from "pino";
import { startPostgres, startRedisNodes, startS3, type RedisNodes, type ServerFaults, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGateway } from "./index.js";
import { serve, type Serving } from "./http/server.js";
import { API_KEYS, bearer, FENCE_KEYS, httpClient, KEYS, writeHeaders, type Answer, type HttpClient } from "./test-support.js";

/**
 * Real servers, really stopped: PostgreSQL and radosgw paused with SIGSTOP (connections stay open,
 * nothing answers), a majority of the Redis lock nodes paused. The gateway answers 503 with
 * Retry-After within its deadlines, and serves again by itself once the server is back.
 */
const STORE_TIMEOUT_MS = 1_000;
const ACQUIRE_TIMEOUT_MS = 1_000;
const NODE_TIMEOUT_MS = 200;
/** What the deadline of the call may be late by on a loaded machine: the request's own work, the timers. */
const SLACK_MS = 1_500;

interface Servers {
  readonly postgres: { readonly url: string; readonly faults: ServerFaults; stop(): Promise<void> };
  readonly s3: StartedS3 & { readonly faults: ServerFaults };
  readonly redis: RedisNodes;
}

let servers: Servers;
let pool: pg.Pool;
let redisClients: Redis[];
let serving: Serving;
let bucket: string;
let client: HttpClient;
/** Time to the 503 with each backend paused, for the report. */
const measured: Record<string, number | string> = {};

beforeAll(async () => {
  const [postgres, s3, redis] = await Promise.all([
    startPostgres({ faults: true }),
    startS3({ faults: true }),
    startRedisNodes(3, { faults: true }),
  ]);
  servers = { postgres, s3, redis };
  pool = new pg.Pool({ connectionString: postgres.url, max: 8 });
  pool.on("error", () => undefined); // a paused or restarted server drops idle connections
  redisClients = redis.urls.map((url) => new Redis(url).on("error", () => undefined));
  const gateway = createGateway({
    apiKeys: API_KEYS,
    fenceKeys: FENCE_KEYS,
    logger: pino({ level: "silent" }),
    defaultMetrics: false,
    storeTimeoutMs: STORE_TIMEOUT_MS,
    // /healthz with one store paused must find the others answering: far above any answer, where 500 ms
    // can be missed by a backend that is up on a busy machine (radosgw most of all).
    healthTimeoutMs: 2_000,
    records: { pool },
    objects: { client: s3.client(), bucket: (bucket = await s3.createBucket()) },
    // Retries configured: a lock without a quorum still answers after one attempt.
    leases: { clients: redisClients, redlock: { nodeTimeoutMs: NODE_TIMEOUT_MS, retryCount: 5 }, acquireTimeoutMs: ACQUIRE_TIMEOUT_MS },
  });
  await gateway.prepare();
  serving = await serve(gateway.app);
  client = httpClient(serving.port, 64, 60_000);
}, 300_000);

afterAll(async () => {
  client?.close();
  await serving?.drain(1_000);
  for (const c of redisClients ?? []) c.disconnect();
  await pool?.end().catch(() => undefined);
  await Promise.allSettled([servers?.postgres.stop(), servers?.s3.stop(), servers?.redis.stop()]);
  console.info(`time to 503 with the backend paused (ms): ${JSON.stringify(measured)}`);
}, 120_000);

async function timed(ask: () => Promise<Answer>): Promise<{ answer: Answer; ms: number }> {
  const started = performance.now();
  const answer = await ask();
  return { answer, ms: performance.now() - started };
}

/** Asks until `ok` holds for an answer, or `withinMs` passed; resolves with how long it took. */
async function recovers(ask: () => Promise<Answer>, ok: (a: Answer) => boolean, withinMs: number): Promise<number> {
  const started = performance.now();
  for (;;) {
    const answer = await ask();
    if (ok(answer)) return performance.now() - started;
    if (performance.now() - started > withinMs) throw new Error(`still ${answer.status} after ${withinMs} ms: ${answer.text()}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

function expect503(answer: Answer, types: readonly string[]): void {
  expect(answer.status, answer.text()).toBe(503);
  expect(answer.headers["retry-after"]).toMatch(/^[0-9]+$/);
  expect(types).toContain(answer.json().type);
}

const UNAVAILABLE = ["/problems/unavailable"];
const WRITE_FAILED = ["/problems/unavailable", "/problems/outcome-unknown"];

describe("a backend paused: 503 within the deadline, and back by itself", () => {
  let token = 0n;
  const put = (store: "records" | "objects", key: string): Promise<Answer> =>
    client.send({
      method: "PUT",
      path: `/v1/${store}/${key}`,
      headers: { ...writeHeaders(KEYS.admin, ++token), "content-type": "application/json" },
      body: JSON.stringify({ n: Number(token) }),
    });
  const get = (store: "records" | "objects", key: string): Promise<Answer> =>
    client.send({ method: "GET", path: `/v1/${store}/${key}`, headers: bearer(KEYS.admin) });

  for (const [store, server] of [
    ["records", () => servers.postgres.faults],
    ["objects", () => servers.s3.faults],
  ] as const) {
    it(`${store}: its server paused`, async () => {
      const key = `faults/${store}`;
      expect((await put(store, key)).status).toBe(200);
      server().pause();
      try {
        const write = await timed(() => put(store, key));
        expect503(write.answer, WRITE_FAILED);
        expect(write.ms).toBeLessThan(STORE_TIMEOUT_MS + SLACK_MS);
        const read = await timed(() => get(store, key));
        expect503(read.answer, UNAVAILABLE);
        // A read writes nothing whatever happens: its answer does not speak of writes.
        expect(String(read.answer.json().detail)).not.toMatch(/written/);
        expect(read.ms).toBeLessThan(STORE_TIMEOUT_MS + SLACK_MS);
        measured[`${store} write`] = `${Math.round(write.ms)} ${String(write.answer.json().type)}`;
        measured[`${store} read`] = Math.round(read.ms);
        // One store paused while the others serve: ready, degraded (every instance sees the same outage).
        const health = await client.send({ method: "GET", path: "/healthz" });
        expect(health.status).toBe(200);
        expect(health.json()).toMatchObject({ status: "degraded" });
      } finally {
        server().resume();
      }
      measured[`${store} recovered after`] = Math.round(
        await recovers(
          () => put(store, key),
          (a) => a.status === 200,
          30_000,
        ),
      );
      expect((await get(store, key)).status).toBe(200);
    }, 120_000);
  }

  it("leases: a majority of the lock nodes paused", async () => {
    const lease = (resource: string): Promise<Answer> => client.json("POST", "/v1/leases", { resource, ttlMs: 5_000 }, bearer(KEYS.admin));
    expect((await lease("faults/lease-0")).status).toBe(201);
    const nodes = servers.redis.nodes.slice(0, 2);
    for (const node of nodes) node.pause();
    try {
      const paused = await timed(() => lease("faults/lease-1"));
      expect503(paused.answer, UNAVAILABLE);
      // One attempt: at most three rounds of the node timeout, however many retries are configured.
      expect(paused.ms).toBeLessThan(3 * NODE_TIMEOUT_MS + SLACK_MS);
      measured["leases (2 of 3 nodes paused)"] = Math.round(paused.ms);
    } finally {
      for (const node of nodes) node.resume();
    }
    measured["leases recovered after"] = Math.round(
      await recovers(
        () => lease("faults/lease-2"),
        (a) => a.status === 201,
        30_000,
      ),
    );
  }, 120_000);

  // What the SDK's provider chain throws when it finds no credentials (IMDS down, an expired SSO session …).
  const noCredentials = Object.assign(new Error("Could not load credentials from any providers"), {
    name: "CredentialsProviderError",
    tryNextLink: false,
  });
  it.each([
    [
      "a backend's own error answer (S3 refusing the credentials)",
      () => ({ accessKeyId: servers.s3.accessKeyId, secretAccessKey: "not-the-secret" }),
    ],
    ["the S3 client's credentials provider failing", () => () => Promise.reject(noCredentials)],
  ] as const)("%s is 502 backend-error, never a 500", async (_, credentials) => {
    const { endpoint, region } = servers.s3;
    const s3 = new S3Client({
      endpoint,
      region,
      forcePathStyle: true,
      credentials: credentials(),
      requestChecksumCalculation: "WHEN_REQUIRED",
      responseChecksumValidation: "WHEN_REQUIRED",
    });
    const gateway = createGateway({
      apiKeys: API_KEYS,
      logger: pino({ level: "silent" }),
      defaultMetrics: false,
      objects: { client: s3, bucket },
    });
    await using other = await serve(gateway.app);
    const otherClient = httpClient(other.port);
    try {
      for (const ask of [
        { method: "GET", path: "/v1/objects/faults/denied", headers: bearer(KEYS.admin) },
        { method: "PUT", path: "/v1/objects/faults/denied", headers: writeHeaders(KEYS.admin, 1n), body: "x" },
      ]) {
        const answer = await otherClient.send(ask);
        expect(answer.status, answer.text()).toBe(502);
        expect(answer.json()).toMatchObject({ type: "/problems/backend-error", backend: "s3" });
      }
    } finally {
      otherClient.close();
      s3.destroy();
    }
  });

  it("leases: a held lock is retried only within acquireTimeoutMs", async () => {
    const lease = (): Promise<Answer> => client.json("POST", "/v1/leases", { resource: "faults/held", ttlMs: 30_000 }, bearer(KEYS.admin));
    expect((await lease()).status).toBe(201);
    const held = await timed(lease);
    expect(held.answer.status).toBe(409);
    expect(held.answer.json().type).toBe("/problems/lock-held");
    // Five retries of 200 to 300 ms would take longer than the deadline: the last ones are never started.
    expect(held.ms).toBeGreaterThan(200);
    expect(held.ms).toBeLessThan(ACQUIRE_TIMEOUT_MS + SLACK_MS);
    measured["leases held (retried within the deadline)"] = Math.round(held.ms);
  });

  it("leases: a majority of the lock nodes killed, then restarted", async () => {
    const lease = (resource: string): Promise<Answer> => client.json("POST", "/v1/leases", { resource, ttlMs: 5_000 }, bearer(KEYS.admin));
    const nodes = servers.redis.nodes.slice(1, 3);
    await Promise.all(nodes.map((node) => node.kill()));
    try {
      const down = await timed(() => lease("faults/lease-3"));
      expect503(down.answer, UNAVAILABLE);
      expect(down.ms).toBeLessThan(3 * NODE_TIMEOUT_MS + SLACK_MS);
      measured["leases (2 of 3 nodes killed)"] = Math.round(down.ms);
    } finally {
      await Promise.all(nodes.map((node) => node.restart()));
    }
    measured["leases recovered after restart"] = Math.round(
      await recovers(
        () => lease("faults/lease-4"),
        (a) => a.status === 201,
        30_000,
      ),
    );
  }, 120_000);
});
