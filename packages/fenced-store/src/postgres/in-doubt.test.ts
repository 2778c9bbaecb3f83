import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutcomeUnknownError, StoreUnavailableError } from "../errors.js";
import { CutProxy, SYNC_MESSAGE } from "./cut-proxy-test-support.js";
import { faultHarness, timed, type FaultHarness } from "./fault-test-support.js";
import { FencedPostgres } from "./store.js";
import { fenceAt as f, outcome, sleep } from "./test-support.js";

// A single-statement write (register, put, the conditional writes) that the store gave up on must
// not commit later. Its commit is PostgreSQL's Sync, which the store lets leave only once the
// statement's answer is in: a statement that runs after the call failed — it waited on a lock, or sat
// in the socket of a paused server — finds its client gone and is rolled back.

let h: FaultHarness;
const TIMEOUT_MS = 300;

beforeAll(async () => {
  h = await faultHarness();
});

afterAll(async () => {
  await h.close();
});

/** Holds `resource`'s fence row locked from a client of the test's own, so a write to it waits. */
async function lockFence(store: FencedPostgres, resource: string): Promise<pg.Client> {
  const holder = await h.client();
  await holder.query("BEGIN");
  await holder.query(`SELECT 1 FROM "${store.schema}".fence WHERE resource = $1 FOR UPDATE`, [resource]);
  return holder;
}

describe("a single-statement write the store gave up on never commits later", () => {
  it("waiting on the fence row past the deadline: StoreUnavailableError, and nothing lands once the lock is free", async () => {
    const store = await h.store("lock_wait", TIMEOUT_MS);
    const fence = f("r", 5n, "h5");
    const v0 = await store.put("k", "v0", { fence });
    const writes: [string, () => Promise<unknown>][] = [
      ["put", () => store.put("k", "late put", { fence })],
      ["put", () => store.put("k", "late conditional put", { fence, ifVersion: v0.version })],
      ["delete", () => store.delete("k", { fence, ifVersion: v0.version })],
      ["register", () => store.register(f("r", 6n, "h6"))],
    ];
    for (const [operation, write] of writes) {
      const holder = await lockFence(store, "r");
      const { ms, value } = await timed(write());
      expect(value).toBeInstanceOf(StoreUnavailableError);
      expect(value).toMatchObject({ backend: "postgres", reason: "timeout", operation });
      expect(ms).toBeLessThan(TIMEOUT_MS + 500);
      // The statement still waits on the server; the lock is freed, it runs, and its client is gone.
      await holder.query("COMMIT");
      await sleep(200);
      expect(await store.get("k")).toMatchObject({ value: "v0", version: v0.version });
      expect(await h.pool.query(`SELECT token FROM "${store.schema}".fence WHERE resource = 'r'`)).toMatchObject({
        rows: [{ token: "5" }],
      });
    }
    // The same holder writes on, and its write stays.
    const v2 = await store.put("k", "v2", { fence });
    await sleep(200);
    expect(await store.get("k")).toMatchObject({ value: "v2", version: v2.version });
  });

  it("sent to a paused server: the deadline passes, the server resumes and runs it, and it does not apply", async () => {
    const store = await h.store("paused", TIMEOUT_MS);
    const fence = f("r", 1n, "h1");
    const v0 = await store.put("k", "v0", { fence });
    const warm = await Promise.all([h.pool.connect(), h.pool.connect()]);
    for (const client of warm) client.release();
    h.faults.pause();
    let results: { ms: number; value: unknown }[];
    try {
      results = await Promise.all([
        timed(store.put("k", "late put", { fence })),
        timed(store.put("k", "late conditional put", { fence, ifVersion: v0.version })),
      ]);
    } finally {
      h.faults.resume();
    }
    for (const { ms, value } of results) {
      expect(value).toBeInstanceOf(StoreUnavailableError);
      expect(value).toMatchObject({ reason: "timeout", operation: "put" });
      expect(ms).toBeLessThan(TIMEOUT_MS + 500);
    }
    await sleep(300);
    expect(await store.get("k")).toMatchObject({ value: "v0", version: v0.version });
    const v2 = await store.put("k", "v2", { fence });
    await sleep(200);
    expect(await store.get("k")).toMatchObject({ value: "v2", version: v2.version });
  });

  it("the commit sent and its answer lost: OutcomeUnknownError, and the write did land", async () => {
    const store = await h.store("lost_sync", 2_000);
    const url = new URL(h.server.url);
    const proxy = await CutProxy.start({ host: url.hostname, port: Number(url.port) });
    url.host = `127.0.0.1:${proxy.port}`;
    const pool = new pg.Pool({ connectionString: url.toString(), max: 1 });
    pool.on("error", () => undefined);
    try {
      const via = new FencedPostgres(pool, { schema: store.schema, timeoutMs: 2_000 });
      await via.get("k"); // a connection, and the get's own Sync, before the proxy is armed
      proxy.arm(SYNC_MESSAGE);
      const err = await outcome(via.put("k", "landed", { fence: f("r", 1n) }));
      expect(err).toBeInstanceOf(OutcomeUnknownError);
      expect(err).toMatchObject({ key: "k", operation: "put" });
      expect(proxy.cuts).toBe(1);
      expect(await store.get("k")).toMatchObject({ value: "landed", token: 1n });
    } finally {
      await pool.end();
      await proxy.close();
    }
  });

  it("a write the server refuses leaves no connection waiting for its commit: the next call on the pool is answered", async () => {
    const seed = await h.store("refused", 1_000);
    const pool = new pg.Pool({ connectionString: h.server.url, max: 1 });
    pool.on("error", () => undefined);
    try {
      const store = new FencedPostgres(pool, { schema: seed.schema, timeoutMs: 1_000 });
      const v1 = await store.put("k", 1, { fence: f("r", 1n) });
      await store.put("k", 2, { fence: f("r", 1n) });
      expect(await outcome(store.put("k", 3, { fence: f("r", 1n), ifVersion: v1.version }))).toMatchObject({
        name: "VersionMismatchError",
      });
      expect(await outcome(store.put("k", 3, { fence: f("other", 1n) }))).toMatchObject({ name: "ResourceMismatchError" });
      expect(await outcome(store.delete("k", { fence: f("other", 1n), ifVersion: v1.version }))).toMatchObject({
        name: "ResourceMismatchError",
      });
      const { ms, value } = await timed(store.get("k"));
      expect(value).toMatchObject({ value: 2 });
      expect(ms).toBeLessThan(500);
    } finally {
      await pool.end();
    }
  });
});
