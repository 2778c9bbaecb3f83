import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutcomeUnknownError, StoreUnavailableError } from "../errors.js";
import { faultHarness, timed, type FaultHarness } from "./fault-test-support.js";
import { FencedPostgres } from "./store.js";
import { fenceAt as f, outcome, sleep } from "./test-support.js";

// PostgreSQL killed, restarted and paused under the store's calls. Each call must end in a typed
// error (never an 'error' event nobody listens to, which vitest reports as an unhandled error and
// which would end a real process), and the same store instance must work again once the server is back.

let h: FaultHarness;
let store: FencedPostgres<pg.PoolClient>;
const TIMEOUT_MS = 1_000;

beforeAll(async () => {
  h = await faultHarness();
  store = await h.store("faults", TIMEOUT_MS);
});

afterAll(async () => {
  await h.close();
});

/** Holds `resource`'s fence row locked from a client of the test's own, so a write to it waits. */
async function lockFence(resource: string): Promise<pg.Client> {
  await store.register(f(resource, 1n));
  const holder = await h.client();
  await holder.query("BEGIN");
  await holder.query(`SELECT 1 FROM "${store.schema}".fence WHERE resource = $1 FOR UPDATE`, [resource]);
  return holder;
}

/** Kills the server while `call` is in flight (waiting for a lock), then restarts it; resolves what the call settled with. */
async function killDuring(call: Promise<unknown>, lockWaits = 1): Promise<unknown> {
  const settled = outcome(call);
  await h.waitForLockWaits(lockWaits);
  await h.faults.kill();
  const value = await settled;
  await h.faults.restart();
  return value;
}

/** The same store instance writes and reads again: it recovers by itself. */
async function worksAgain(resource: string, token: bigint): Promise<void> {
  await store.put(`after-${resource}`, { ok: resource }, { fence: f(resource, token) });
  expect(await store.get(`after-${resource}`)).toMatchObject({ value: { ok: resource }, token });
}

describe("PostgreSQL killed during a call", () => {
  it("transaction(): the caller's pg_sleep dies with the server, StoreUnavailableError (COMMIT was never sent)", async () => {
    const running = store.transaction(f("tx", 1n), async (client) => {
      await client.query("SELECT pg_sleep(30)");
      return "slept";
    });
    const settled = outcome(running);
    // The ratchet row is written, the sleep has begun: wait until the backend is in it.
    const watcher = await h.client();
    for (let i = 0; i < 200; i++) {
      const { rows } = await watcher.query("SELECT 1 FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)'");
      if (rows.length > 0) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    await h.faults.kill();
    const err = await settled;
    await h.faults.restart();
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect(err).toMatchObject({ backend: "postgres", reason: "connection", operation: "transaction" });
    expect(await h.pool.query(`SELECT 1 FROM "${store.schema}".fence WHERE resource = 'tx'`)).toMatchObject({ rowCount: 0 });
    await worksAgain("tx", 2n);
  });

  it("transfer(): waiting for the fence row lock, StoreUnavailableError, nothing moved", async () => {
    await store.put("moving", "v", { fence: f("from", 1n) });
    const holder = await lockFence("to");
    const err = await killDuring(store.transfer("moving", { from: f("from", 1n), to: f("to", 2n) }));
    await holder.end().catch(() => undefined);
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect(err).toMatchObject({ reason: "connection", operation: "transfer" });
    expect(await store.get("moving")).toMatchObject({ resource: "from" });
    await worksAgain("from", 3n);
  });

  it("migrate(): waiting for the migration lock, StoreUnavailableError; migrate() again works", async () => {
    const fresh = await h.store("remigrate", TIMEOUT_MS);
    const holder = await h.client();
    await holder.query("SELECT pg_advisory_lock(hashtextextended($1, 0))", [`fenced.migrate:${fresh.schema}`]);
    const err = await killDuring(fresh.migrate());
    await holder.end().catch(() => undefined);
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect(err).toMatchObject({ reason: "connection", operation: "migrate" });
    await fresh.migrate();
    await fresh.put("k", 1, { fence: f("m", 1n) });
  });

  it("put(): waiting for the fence row lock, its commit (Sync) sent with it: OutcomeUnknownError; the server died, nothing applied", async () => {
    const holder = await lockFence("p");
    const err = await killDuring(store.put("k", "v", { fence: f("p", 2n) }));
    await holder.end().catch(() => undefined);
    expect(err).toBeInstanceOf(OutcomeUnknownError);
    expect(err).toMatchObject({ backend: "postgres", key: "k", operation: "put" });
    // The holder's transaction never committed and the put's died with the server: the ratchet is where it was.
    expect(await store.get("k")).toBeUndefined();
    await worksAgain("p", 3n);
  });

  it("a call while the server is down is refused at once; the pool reported its idle clients' errors, not the process", async () => {
    await h.faults.kill();
    try {
      const { ms, value } = await timed(store.get("k"));
      expect(value).toBeInstanceOf(StoreUnavailableError);
      expect(value).toMatchObject({ reason: "refused", operation: "get" });
      expect(ms).toBeLessThan(TIMEOUT_MS);
    } finally {
      await h.faults.restart();
    }
    expect(h.idleErrors.length).toBeGreaterThan(0);
    await worksAgain("p", 4n);
  });
});

describe("PostgreSQL paused (SIGSTOP) under a call", () => {
  it("get, put and transaction each end in a typed error within timeoutMs, and the store works after resume", async () => {
    // Three idle connections, one for each call: each call's statement is sent, and hangs.
    const warm = await Promise.all([h.pool.connect(), h.pool.connect(), h.pool.connect()]);
    for (const client of warm) client.release();
    h.faults.pause();
    let results: { ms: number; value: unknown }[];
    try {
      results = await Promise.all([
        timed(store.get("k")),
        timed(store.put("k", "v", { fence: f("paused", 1n) })),
        timed(store.transaction(f("paused", 1n), () => Promise.resolve("never"))),
      ]);
    } finally {
      h.faults.resume();
    }
    const [get, put, transaction] = results;
    console.log(`paused server: typed errors after ${results.map((r) => Math.round(r.ms)).join(", ")} ms (timeoutMs ${TIMEOUT_MS})`);
    expect(get?.value).toBeInstanceOf(StoreUnavailableError);
    expect(get?.value).toMatchObject({ reason: "timeout", operation: "get" });
    // The put's statement was sent with its commit (Sync, putOrdered): its outcome is unknown. That
    // statement was the shared one (fence-lock.ts), which finds no fence row at this fence and writes
    // nothing; the raise that would have followed it was never sent (below: nothing landed).
    expect(put?.value).toBeInstanceOf(OutcomeUnknownError);
    expect(put?.value).toMatchObject({ key: "k", operation: "put" });
    // BEGIN hung: nothing of the transaction was applied.
    expect(transaction?.value).toBeInstanceOf(StoreUnavailableError);
    expect(transaction?.value).toMatchObject({ reason: "timeout", operation: "transaction" });
    for (const r of results) {
      expect(r.ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
      expect(r.ms).toBeLessThan(TIMEOUT_MS + 500);
    }
    await worksAgain("paused", 2n);
    expect(await store.get("k")).toBeUndefined();
  });

  it("a pool with no idle client: the wait for a new connection is bounded too, and the late connection goes back to the pool", async () => {
    // A pool of its own with no connection yet: the call must open one, and the paused server accepts
    // the TCP connection but never answers the start-up.
    const pool = new pg.Pool({ connectionString: h.server.url, max: 2 });
    pool.on("error", () => undefined);
    const other = new FencedPostgres(pool, { schema: store.schema, timeoutMs: TIMEOUT_MS });
    try {
      h.faults.pause();
      let waited: { ms: number; value: unknown };
      try {
        waited = await timed(other.get("k"));
      } finally {
        h.faults.resume();
      }
      expect(waited.value).toBeInstanceOf(StoreUnavailableError);
      expect(waited.value).toMatchObject({ reason: "timeout", operation: "get" });
      expect(waited.ms).toBeLessThan(TIMEOUT_MS + 500);
      // The connection arrives after the call gave up; it is released, not leaked.
      for (let i = 0; i < 200 && pool.idleCount < 1; i++) await sleep(10);
      expect({ total: pool.totalCount, idle: pool.idleCount }).toEqual({ total: 1, idle: 1 });
      expect(await other.get("after-paused")).toMatchObject({ value: { ok: "paused" } });
    } finally {
      await pool.end();
    }
  });
  it("a pool with no idle client: the caller's abort ends the wait for a connection at once, with its reason, and the late connection goes back", async () => {
    const pool = new pg.Pool({ connectionString: h.server.url, max: 2 });
    pool.on("error", () => undefined);
    const other = new FencedPostgres(pool, { schema: store.schema, timeoutMs: 10_000 });
    const gone = new Error("the caller left");
    try {
      h.faults.pause();
      let waited: { ms: number; value: unknown };
      try {
        const controller = new AbortController();
        setTimeout(() => controller.abort(gone), 200);
        waited = await timed(other.register(f("abort-wait", 1n), { signal: controller.signal }));
      } finally {
        h.faults.resume();
      }
      expect(waited.value).toBe(gone);
      expect(waited.ms).toBeLessThan(2_000); // not the 10 s deadline
      for (let i = 0; i < 200 && pool.idleCount < 1; i++) await sleep(10);
      expect({ total: pool.totalCount, idle: pool.idleCount }).toEqual({ total: 1, idle: 1 });
    } finally {
      await pool.end();
    }
  });
});
