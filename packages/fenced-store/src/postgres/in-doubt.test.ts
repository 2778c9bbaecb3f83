import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutcomeUnknownError } from "../errors.js";
import { FLUSH_THEN_SYNC, poolThroughProxy, SYNC_MESSAGE } from "./cut-proxy-test-support.js";
import { faultHarness, timed, type FaultHarness } from "./fault-test-support.js";
import { FencedPostgres } from "./store.js";
import { fenceAt as f, outcome, sleep } from "./test-support.js";

// A single-statement write the store gave up on must never overwrite a later write of the same
// holder (commit-at.ts, COMMIT_AT). Every single-statement write sends its commit (PostgreSQL's Sync)
// with it: late — it waited on a lock, sat in the socket of a paused server, was delayed on the
// network — it may land (OutcomeUnknownError), but never over the holder's later write: a conditional
// write finds the version it expected gone, and an unconditional put (putOrdered) finds a version at
// its own fence newer than the one it came after (write-order.ts). A put refused as out of order is
// sent again unordered, its Sync only after its answer: late, it finds its connection closed and is
// rolled back (outcomes.test.ts).

let h: FaultHarness;
/**
 * The stores' deadline. The writes under test outlast any deadline (a lock held, a paused server, a
 * proxy holding their messages); every other call, the holder's own writes and reads, must end within
 * it, and a few hundred milliseconds is what a busy machine can make one of them take.
 */
const TIMEOUT_MS = 1_000;

/** How many times the lost Sync after a returned row is played: each round is one connection, a few milliseconds. */
const ROUNDS = 20;

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

/** The fence row's token, as committed. */
async function tokenOf(store: FencedPostgres, resource: string): Promise<string | undefined> {
  const { rows } = await h.pool.query<{ token: string }>(`SELECT token FROM "${store.schema}".fence WHERE resource = $1`, [resource]);
  return rows[0]?.token;
}

describe("a single-statement write the store gave up on never overwrites the holder's later write", () => {
  it("an unconditional put waiting on the fence row past the deadline: OutcomeUnknownError; once the lock is free it lands, before the holder's next write, which stays", async () => {
    const store = await h.store("lock_wait", TIMEOUT_MS);
    const fence = f("r", 5n, "h5");
    await store.put("k", "v0", { fence });
    const holder = await lockFence(store, "r");
    const { ms, value } = await timed(store.put("k", "late put", { fence }));
    expect(value).toBeInstanceOf(OutcomeUnknownError);
    expect(value).toMatchObject({ backend: "postgres", key: "k", operation: "put" });
    expect(ms).toBeLessThan(TIMEOUT_MS + 500);
    // Its commit was sent with it: once the lock is free it runs and commits, its client gone.
    await holder.query("COMMIT");
    await expect.poll(() => store.get("k").then((r) => r?.value), { timeout: 5_000 }).toBe("late put");
    // The same holder writes on, and its write stays.
    const v2 = await store.put("k", "v2", { fence });
    await sleep(200);
    expect(await store.get("k")).toMatchObject({ value: "v2", version: v2.version });
  });

  it("register, putAll and the conditional writes waiting on the fence row past the deadline: OutcomeUnknownError; once the lock is free they land, before the holder's next write", async () => {
    const store = await h.store("lock_wait_sent", TIMEOUT_MS);
    const fence = f("r", 5n, "h5");
    const put0 = await store.put("put", "v0", { fence });
    const del0 = await store.put("delete", "v0", { fence });
    const writes: [string, () => Promise<unknown>, () => Promise<unknown>][] = [
      ["put", () => store.put("put", "late", { fence, ifVersion: put0.version }), () => store.get("put").then((r) => r?.value)],
      ["delete", () => store.delete("delete", { fence, ifVersion: del0.version }), () => store.get("delete").then((r) => r?.value)],
      ["putAll", () => store.putAll([{ key: "all", value: "late" }], { fences: [fence] }), () => store.get("all").then((r) => r?.value)],
      ["register", () => store.register(f("r", 6n, "h6")), () => tokenOf(store, "r")],
    ];
    const landed = ["late", undefined, "late", "6"];
    for (const [i, [operation, write, seen]] of writes.entries()) {
      const holder = await lockFence(store, "r");
      const { ms, value } = await timed(write());
      expect(value).toBeInstanceOf(OutcomeUnknownError);
      expect(value).toMatchObject({ backend: "postgres", operation });
      expect(ms).toBeLessThan(TIMEOUT_MS + 500);
      // Its commit was sent with it: once the lock is free it runs and commits, its client gone or not.
      await holder.query("COMMIT");
      await expect.poll(seen, { timeout: 5_000 }).toBe(landed[i]);
    }
    // The late writes came first: the holder of the highest token writes on, and its write stays.
    const next = await store.put("put", "next", { fence: f("r", 6n, "h6") });
    await sleep(200);
    expect(await store.get("put")).toMatchObject({ value: "next", version: next.version });
  });

  it("sent to a paused server: the deadline passes, the server resumes and runs them; they land, and the holder's next write stays", async () => {
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
        timed(store.put("other", "late conditional put", { fence, ifVersion: v0.version })),
      ]);
    } finally {
      h.faults.resume();
    }
    expect(results.map(({ value }) => value)).toEqual([expect.any(OutcomeUnknownError), expect.any(OutcomeUnknownError)]);
    expect(results[0]!.value).toMatchObject({ key: "k", operation: "put" });
    for (const { ms } of results) expect(ms).toBeLessThan(TIMEOUT_MS + 500);
    // Resumed, the server runs what it was sent: the put lands (nothing was written since it was sent).
    await expect.poll(() => store.get("k").then((r) => r?.value), { timeout: 5_000 }).toBe("late put");
    const v2 = await store.put("k", "v2", { fence });
    await sleep(200);
    expect(await store.get("k")).toMatchObject({ value: "v2", version: v2.version });
  });

  it("delayed on the network past the deadline, then delivered: each finds the holder's later write and is refused, the conditional writes by version, the unconditional put and putAll by the version they came after", async () => {
    const seed = await h.store("delayed", TIMEOUT_MS);
    const { proxy, pool, close } = await poolThroughProxy(h.server.url, (c) => new pg.Pool({ connectionString: c, max: 4 }));
    try {
      const via = new FencedPostgres(pool, { schema: seed.schema, timeoutMs: TIMEOUT_MS });
      const fence = f("r", 1n, "h1");
      // Written through `via`: its puts of the key come after this version (write-order.ts).
      const v0 = await via.put("k", "v0", { fence });
      // Connections through the proxy before it holds, so that only the writes' own messages are delayed.
      await Promise.all([via.get("k"), via.get("k"), via.get("k"), via.get("k")]);
      proxy.hold();
      const late = await Promise.all([
        timed(via.put("k", "late conditional put", { fence, ifVersion: v0.version })),
        timed(via.delete("k", { fence, ifVersion: v0.version })),
        timed(via.put("k", "late put", { fence })),
        // putAll's unconditional records come after v0 too: a new key beside k, all or nothing.
        timed(
          via.putAll(
            [
              { key: "k", value: "late putAll" },
              { key: "new", value: "late putAll" },
            ],
            { fences: [fence] },
          ),
        ),
      ]);
      expect(late.map(({ value }) => (value as Error).name)).toEqual(Array(4).fill("OutcomeUnknownError"));
      for (const { ms } of late) expect(ms).toBeLessThan(TIMEOUT_MS + 500);
      // The holder, told its writes may have landed, writes on (through another store, which has not
      // seen v0 and so sends its put unordered); its write is acknowledged.
      const v2 = await seed.put("k", "v2", { fence });
      // The delayed messages arrive, their senders' connections closed behind them, and the server runs them.
      proxy.deliver();
      await expect.poll(() => proxy.connections, { timeout: 5_000 }).toBe(0);
      expect(await seed.get("k")).toMatchObject({ value: "v2", version: v2.version });
      expect(await seed.get("new")).toBeUndefined();
    } finally {
      await close();
    }
  });

  it("a lease's first write of a key, no register before it: its raise (the exclusive putOrdered) delayed on the network past the deadline, then delivered after the holder wrote the key again: refused by the version it came after", async () => {
    const seed = await h.store("delayed_raise", TIMEOUT_MS);
    const { proxy, pool, close } = await poolThroughProxy(h.server.url, (c) => new pg.Pool({ connectionString: c, max: 1 }));
    try {
      const via = new FencedPostgres(pool, { schema: seed.schema, timeoutMs: TIMEOUT_MS });
      const fence = f("r", 1n, "h1");
      // An older lease's row: the shared statement finds another fence and writes nothing, so the put
      // is sent again as the raise, the one statement the proxy holds back.
      await seed.put("other", "old lease", { fence: f("r", 0n, "h0") });
      await via.get("k"); // a connection through the proxy, before it holds
      proxy.holdFrom(Buffer.from("fenced:putOrdered:"));
      const late = await timed(via.put("k", "late raise", { fence }));
      expect(late.value).toBeInstanceOf(OutcomeUnknownError);
      expect(late.ms).toBeLessThan(TIMEOUT_MS + 500);
      // The holder, told its write may have landed, writes the key again (through another store) and is acknowledged.
      const v2 = await seed.put("k", "v2", { fence });
      proxy.deliver();
      await expect.poll(() => proxy.connections, { timeout: 5_000 }).toBe(0);
      expect(await seed.get("k")).toMatchObject({ value: "v2", version: v2.version });
    } finally {
      await close();
    }
  });

  it("an unordered put (after its answer) that wrote, the answer to its Sync lost: OutcomeUnknownError and it landed, every time", async () => {
    const seed = await h.store("lost_unordered_sync", 2_000);
    const { proxy, pool, close } = await poolThroughProxy(h.server.url, (c) => new pg.Pool({ connectionString: c, max: 1 }));
    const fence = f("r", 1n, "h1");
    try {
      const via = new FencedPostgres(pool, { schema: seed.schema, timeoutMs: 2_000 });
      for (let i = 0; i < ROUNDS; i++) {
        await via.get("k"); // a new connection (the last cut closed it), and what `via` has seen of the key
        // Written at this fence by another store: `via` has not seen it, so its put is refused as out of
        // order and sent again unordered, its Sync alone once the statement's row is in.
        await seed.put("k", { round: i, by: "seed" }, { fence });
        proxy.arm(FLUSH_THEN_SYNC);
        const err = await outcome(via.put("k", { round: i, by: "via" }, { fence }));
        expect(proxy.cuts, `round ${i}`).toBe(i + 1);
        expect(err, `round ${i}`).toBeInstanceOf(OutcomeUnknownError);
        expect(err).toMatchObject({ key: "k", operation: "put" });
        expect(await seed.get("k"), `round ${i}`).toMatchObject({ value: { round: i, by: "via" } });
      }
    } finally {
      await close();
    }
  });

  it("through a pool whose clients do not show pg's protocol connection (a wrapper): an unordered put that wrote, its Sync's answer lost, is OutcomeUnknownError — the store cannot see when the Sync left", async () => {
    const seed = await h.store("wrapped_sync", 2_000);
    const { proxy, pool, close } = await poolThroughProxy(h.server.url, (c) => new pg.Pool({ connectionString: c, max: 1 }));
    // What a wrapper passes on: query(), release() and the client's 'error' events, nothing of pg's internals.
    const wrapped = {
      query: (config: pg.QueryConfig) => pool.query(config),
      connect: async () => {
        const client = await pool.connect();
        return {
          query: (config: pg.QueryConfig) => client.query(config),
          release: (err?: Error | boolean) => client.release(err),
          on: (event: "error", listener: (err: Error) => void) => client.on(event, listener),
          removeListener: (event: "error", listener: (err: Error) => void) => client.removeListener(event, listener),
        };
      },
    };
    try {
      const via = new FencedPostgres(wrapped, { schema: seed.schema, timeoutMs: 2_000 });
      const fence = f("r", 1n, "h1");
      await via.get("k");
      await seed.put("k", "seed", { fence });
      proxy.arm(FLUSH_THEN_SYNC);
      const err = await outcome(via.put("k", "landed", { fence }));
      expect(proxy.cuts).toBe(1);
      expect(err).toBeInstanceOf(OutcomeUnknownError);
      expect(await seed.get("k")).toMatchObject({ value: "landed" });
    } finally {
      await close();
    }
  });

  it("the commit sent and its answer lost: OutcomeUnknownError, and the write did land", async () => {
    const store = await h.store("lost_sync", 2_000);
    const { proxy, pool, close } = await poolThroughProxy(h.server.url, (c) => new pg.Pool({ connectionString: c, max: 1 }));
    try {
      const via = new FencedPostgres(pool, { schema: store.schema, timeoutMs: 2_000 });
      await via.get("k"); // a connection, and the get's own Sync, before the proxy is armed
      await store.register(f("r", 1n)); // the row at the fence: the put is one statement, its Sync the first
      proxy.arm(SYNC_MESSAGE);
      const err = await outcome(via.put("k", "landed", { fence: f("r", 1n) }));
      expect(err).toBeInstanceOf(OutcomeUnknownError);
      expect(err).toMatchObject({ key: "k", operation: "put" });
      expect(proxy.cuts).toBe(1);
      expect(await store.get("k")).toMatchObject({ value: "landed", token: 1n });
    } finally {
      await close();
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
