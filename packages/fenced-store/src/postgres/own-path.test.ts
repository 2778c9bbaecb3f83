import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutcomeUnknownError, StaleTokenError } from "../errors.js";
import { countedStore, sentBy } from "./counted-test-support.js";
import { poolThroughProxy, SYNC_MESSAGE } from "./cut-proxy-test-support.js";
import { timed } from "./fault-test-support.js";
import { FencedPostgres } from "./store.js";
import { copyAndRow, lockWaiters } from "./own-test-support.js";
import { fenceAt as f, outcome, pgHarness, type PgHarness } from "./test-support.js";

// The one-row path (own-sql.ts; PROTOCOL.md, "The one-row path"): a write whose key is its fence's
// resource, decided on the record's fence copy alone. Each case builds, on a real server, the
// interleaving that would break a copy that falls behind its fence row.

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

/** A client of the test's own, in a transaction holding record `key`'s row locked. */
async function lockRecord(store: FencedPostgres, key: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: h.url });
  await client.connect();
  await client.query("BEGIN");
  await client.query(`SELECT 1 FROM "${store.schema}".records WHERE key = $1 FOR UPDATE`, [key]);
  return client;
}

describe("FencedPostgres: the one-row path", () => {
  it("a lease writing its own key: its first write raises the fence row, every later one is one UPDATE of the record", async () => {
    const seed = await h.store("own_steady");
    const via = await countedStore(h.url, seed.schema);
    try {
      const lease = f("r", 1n, "h1");
      const first = await sentBy(via.sent, () => via.store.put("r", 0, { fence: lease }));
      // No record yet: the one-row statement finds nothing, the shared one no fence row, the raise writes both.
      expect(first.statements).toEqual(["putOwn", "putOrderedShared", "putOrdered"]);
      expect(await copyAndRow(h.pool, seed, "r")).toEqual({ copy: "1", copyHolder: "h1", token: "1", holder: "h1" });
      const steady = await sentBy(via.sent, () => via.store.put("r", 1, { fence: lease }));
      expect(steady.statements).toEqual(["putOwn"]);
      const version = (steady.value as { version: string }).version;
      expect((await sentBy(via.sent, () => via.store.put("r", 2, { fence: lease, ifVersion: version }))).statements).toEqual([
        "putOwnIfVersion",
      ]);
      expect((await sentBy(via.sent, () => via.store.delete("r", { fence: lease }))).statements).toEqual(["deleteOwn"]);
      const again = await via.store.put("r", 3, { fence: lease });
      expect((await sentBy(via.sent, () => via.store.delete("r", { fence: lease, ifVersion: again.version }))).statements).toEqual([
        "deleteOwnIfVersion",
      ]);
      // ifVersion never matches a tombstone, on this path as on the other (capabilities.ifVersionMatchesTombstone).
      const tombstone = await via.store.delete("r", { fence: lease });
      expect(await outcome(via.store.put("r", "over a tombstone", { fence: lease, ifVersion: tombstone.version }))).toMatchObject({
        name: "VersionMismatchError",
        actual: undefined,
      });
      // A key that is not its resource's name: the fence-row path, as before, and record r is left alone.
      expect((await sentBy(via.sent, () => via.store.put("r/item", 0, { fence: lease }))).statements).toEqual(["putOrderedShared"]);
      const item = await via.store.put("r/item", 1, { fence: lease });
      const own = await h.recordRow(seed, "r"); // a tombstone: its version says whether anything wrote it
      expect((await sentBy(via.sent, () => via.store.put("r/item", 2, { fence: lease, ifVersion: item.version }))).statements).toEqual([
        "putIfVersionShared",
      ]);
      expect((await sentBy(via.sent, () => via.store.delete("r/item", { fence: lease }))).statements[0]).toMatch(/^BEGIN/);
      expect(await h.recordRow(seed, "r")).toEqual(own);

      // A new lease registers on acquiring: the raise writes the copy (the trigger), so its first write is one row.
      const next = f("r", 2n, "h2");
      await seed.register(next);
      expect(await copyAndRow(h.pool, seed, "r")).toEqual({ copy: "2", copyHolder: "h2", token: "2", holder: "h2" });
      expect((await sentBy(via.sent, () => via.store.put("r", 4, { fence: next }))).statements).toEqual(["putOwn"]);
      // Its token from another holder (a lock that handed it out twice): refused, the copy names the holder.
      expect(await outcome(via.store.put("r", "twice", { fence: f("r", 2n, "hX") }))).toMatchObject({
        name: "StaleTokenError",
        highestHolder: "h2",
      });
      // The old lease: the one-row statement finds another fence in the copy; the fence-row path refuses it.
      const old = await sentBy(via.sent, () => via.store.put("r", "stale", { fence: lease }));
      expect(old.value).toBeInstanceOf(StaleTokenError);
      expect(old.statements).toEqual(["putOwn", "putOrderedShared", "putOrdered", "highest"]);
      // fence() reads the fence row, whichever path wrote: the same answer.
      expect(await via.store.fence("r")).toEqual({ resource: "r", token: 2n, holder: "h2" });
      expect(await via.store.get("r")).toMatchObject({ value: 4, token: 2n, holder: "h2" });
    } finally {
      await via.close();
    }
  });

  it("a lease of two resources at one token and holder: a one-row write of one's key leaves the other's record alone", async () => {
    const store = await h.store("own_set");
    const [a, b] = [f("a", 1n, "h"), f("b", 1n, "h")];
    await store.put("a", "a0", { fence: a });
    await store.put("b", "b0", { fence: b });
    expect(await store.get("a")).toMatchObject({ value: "a0" });
    const before = await store.get("b");
    expect(before).toMatchObject({ value: "b0" });
    // Both records carry the copy (1, h): only the key's own row is the write's.
    await store.put("a", "a1", { fence: a });
    await store.delete("a", { fence: a });
    expect(await store.get("b")).toEqual(before);
  });

  it("holderless fences on their own key: a higher token shuts the lower out, the copy compared by token as well as holder", async () => {
    const store = await h.store("own_holderless");
    const [old, next] = [f("r", 1n), f("r", 2n)];
    await store.put("r", "v1", { fence: old });
    await store.put("r", "v2", { fence: old }); // one row: the copy is (1, null)
    await store.register(next);
    expect(await outcome(store.put("r", "stale", { fence: old }))).toMatchObject({ name: "StaleTokenError", token: 1n, highest: 2n });
    expect(await outcome(store.delete("r", { fence: old }))).toBeInstanceOf(StaleTokenError);
    expect(await store.get("r")).toMatchObject({ value: "v2", token: 1n });
  });

  it("the one-row put, its answer cut after its commit was sent: OutcomeUnknownError, and it landed", async () => {
    const seed = await h.store("own_lost");
    const via = await countedStore(h.url, seed.schema, 2_000);
    try {
      const lease = f("r", 1n, "h1");
      await via.store.put("r", { n: 1 }, { fence: lease });
      via.proxy.arm(SYNC_MESSAGE);
      const lost = await sentBy(via.sent, () => via.store.put("r", { n: 2 }, { fence: lease }));
      expect(lost.statements).toEqual(["putOwn"]);
      expect(lost.value).toBeInstanceOf(OutcomeUnknownError);
      expect(lost.value).toMatchObject({ key: "r", operation: "put" });
      expect(await seed.get("r")).toMatchObject({ value: { n: 2 }, token: 1n });
      // The store never saw the landed version: its next put is out of order for the one-row statement
      // (no row), then for the ordered one, and lands unordered.
      const next = await sentBy(via.sent, () => via.store.put("r", { n: 3 }, { fence: lease }));
      expect(next.statements).toEqual(["putOwn", "putOrderedShared", "putShared"]);
      expect(await seed.get("r")).toMatchObject({ value: { n: 3 } });
    } finally {
      await via.close();
    }
  });

  it("a raise by another instance while a one-row write waits on the record's lock: the write meets the new copy and is refused as stale", async () => {
    const store = await h.store("own_raise_waits");
    const old = f("r", 1n, "h1");
    await store.put("r", "v1", { fence: old });
    await store.put("r", "v2", { fence: old }); // the copy is at the old lease's fence: the one-row path
    const blocker = await lockRecord(store, "r");
    try {
      // The raise first in the record's queue: its fence row updated, its trigger waiting for record r.
      const raise = store.register(f("r", 2n, "h2"));
      await expect.poll(() => lockWaiters(h.pool)).toBe(1);
      const write = outcome(store.put("r", "stale write", { fence: old }));
      await expect.poll(() => lockWaiters(h.pool)).toBe(2);
      await blocker.query("COMMIT");
      await raise;
      // The one-row UPDATE re-read the newest row (copy 2), wrote nothing; the fence-row path refused it.
      const refused = await write;
      expect(refused).toBeInstanceOf(StaleTokenError);
      expect(refused).toMatchObject({ token: 1n, highest: 2n });
      expect(await store.get("r")).toMatchObject({ value: "v2", token: 1n });
      expect(await copyAndRow(h.pool, store, "r")).toMatchObject({ copy: "2", token: "2" });
    } finally {
      await blocker.end();
    }
  });

  it("an instance of earlier code raising the fence row alone (no copy in its statements): the trigger keeps the copy, the old lease is refused", async () => {
    const store = await h.store("own_old_instance");
    const old = f("r", 1n, "h1");
    await store.put("r", "v1", { fence: old });
    await store.put("r", "v2", { fence: old });
    // The ratchet as the code before the copy sent it: the fence row only.
    await h.pool.query(
      `INSERT INTO "${store.schema}".fence AS f (resource, token, holder) VALUES ($1, $2, $3)
       ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, holder = EXCLUDED.holder
       WHERE f.token < EXCLUDED.token OR (f.token = EXCLUDED.token AND f.holder IS NOT DISTINCT FROM EXCLUDED.holder)`,
      ["r", "2", "h2"],
    );
    // Its record write, as that code sent it: no copy named; an update leaves the copy as the trigger set it.
    await h.pool.query(
      `INSERT INTO "${store.schema}".records AS r (key, value, token, resource, holder) VALUES ($1, $2::jsonb, $3, $1, $4)
       ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = nextval('"${store.schema}".record_version'), token = EXCLUDED.token, holder = EXCLUDED.holder`,
      ["r", '"by the old instance"', "2", "h2"],
    );
    expect(await copyAndRow(h.pool, store, "r")).toMatchObject({ copy: "2", copyHolder: "h2" });
    expect(await outcome(store.put("r", "stale", { fence: old }))).toBeInstanceOf(StaleTokenError);
    expect(await outcome(store.delete("r", { fence: old }))).toBeInstanceOf(StaleTokenError);
    expect(await store.get("r")).toMatchObject({ value: "by the old instance", token: 2n });
    await store.put("r", "v3", { fence: f("r", 2n, "h2") });
    expect(await store.get("r")).toMatchObject({ value: "v3", token: 2n, holder: "h2" });
  });

  it("the key moved away and back by transfer: it loses its copy, so a fence the resource has since passed is refused", async () => {
    const store = await h.store("own_transfer");
    const old = f("r", 1n, "h1");
    await store.put("r", "v1", { fence: old });
    await store.transfer("r", { from: old, to: f("x", 1n, "hx") });
    expect(await copyAndRow(h.pool, store, "r")).toMatchObject({ copy: null });
    // While the key is x's, r's fence passes the old lease: its trigger leaves record r alone (not r's).
    await store.register(f("r", 2n, "h2"));
    // Moved back by a transfer naming the columns the code before the copy knew (resource, token, holder, version).
    await h.pool.query(
      `UPDATE "${store.schema}".records SET resource = 'r', token = 2, holder = 'h2', version = nextval('"${store.schema}".record_version') WHERE key = 'r'`,
    );
    expect(await copyAndRow(h.pool, store, "r")).toMatchObject({ copy: null, token: "2" });
    expect(await outcome(store.put("r", "stale", { fence: old }))).toBeInstanceOf(StaleTokenError);
    expect(await outcome(store.put("r", "stale", { fence: old, ifVersion: (await store.get("r"))?.version ?? "" }))).toBeInstanceOf(
      StaleTokenError,
    );
    // The resource's own lease writes on: the fence-row path sets the copy again.
    await store.put("r", "v2", { fence: f("r", 2n, "h2") });
    expect(await copyAndRow(h.pool, store, "r")).toEqual({ copy: "2", copyHolder: "h2", token: "2", holder: "h2" });
  });

  it("putAll and transaction() beside one-row writes: every raise moves the copy, whichever call made it", async () => {
    const store = await h.store("own_mixed");
    const first = f("r", 1n, "h1");
    await store.put("r", "v1", { fence: first });
    // putAll of the own key and another under a newer lease: both records, the copy at its fence.
    const second = f("r", 2n, "h2");
    await store.putAll(
      [
        { key: "r", value: "putAll" },
        { key: "r/item", value: "putAll" },
      ],
      { fences: [second] },
    );
    expect(await copyAndRow(h.pool, store, "r")).toEqual({ copy: "2", copyHolder: "h2", token: "2", holder: "h2" });
    expect(await outcome(store.put("r", "stale", { fence: first }))).toBeInstanceOf(StaleTokenError);
    // transaction() raises without writing record r: the trigger moves the copy.
    await store.transaction(f("r", 3n, "h3"), () => Promise.resolve());
    expect(await copyAndRow(h.pool, store, "r")).toMatchObject({ copy: "3", copyHolder: "h3" });
    // Again at the fence the row holds: the ratchet rewrites the fence row, the copy is left as it is (no record version).
    const xmin = async () =>
      (await h.pool.query<{ x: string }>(`SELECT xmin::text AS x FROM "${store.schema}".records WHERE key = 'r'`)).rows[0]?.x;
    const before = await xmin();
    await store.transaction(f("r", 3n, "h3"), () => Promise.resolve());
    expect(await xmin()).toBe(before);
    expect(await outcome(store.put("r", "stale", { fence: second }))).toBeInstanceOf(StaleTokenError);
    // One lease's one-row puts, putAll and transaction at once: all land, none waits for another forever.
    const third = f("r", 3n, "h3");
    const all = await Promise.all([
      ...Array.from({ length: 12 }, (_, i) => store.put("r", i, { fence: third })),
      store.putAll([{ key: "r", value: "all" }], { fences: [third] }),
      store.transaction(third, () => Promise.resolve("tx")),
      store.delete("r", { fence: third }),
    ]);
    expect(all).toHaveLength(15);
    expect(await copyAndRow(h.pool, store, "r")).toMatchObject({ copy: "3", token: "3" });
  });

  it("one-row writes delayed on the network past the deadline, then delivered after the holder wrote the key again: each is refused, by the version it came after or the version it expected", async () => {
    const seed = await h.store("own_delayed");
    const { proxy, pool, close } = await poolThroughProxy(h.url, (c) => new pg.Pool({ connectionString: c, max: 4 }));
    try {
      const via = new FencedPostgres(pool, { schema: seed.schema, timeoutMs: 1_000 });
      const fence = f("r", 1n, "h1");
      await via.put("r", "v0", { fence });
      const v0 = await via.put("r", "v0", { fence }); // the copy is at this fence: every write below is one row
      // Connections through the proxy before it holds, so that only the writes' own messages are delayed.
      await Promise.all([via.get("r"), via.get("r"), via.get("r"), via.get("r")]);
      proxy.hold();
      const late = await Promise.all([
        timed(via.put("r", "late put", { fence })),
        timed(via.delete("r", { fence })),
        timed(via.put("r", "late conditional put", { fence, ifVersion: v0.version })),
        timed(via.delete("r", { fence, ifVersion: v0.version })),
      ]);
      expect(late.map(({ value }) => (value as Error).name)).toEqual(Array(4).fill("OutcomeUnknownError"));
      // The holder writes on through another store, which has not seen v0: its put is acknowledged.
      const v2 = await seed.put("r", "v2", { fence });
      proxy.deliver();
      await expect.poll(() => proxy.connections, { timeout: 5_000 }).toBe(0);
      expect(await seed.get("r")).toMatchObject({ value: "v2", version: v2.version });
    } finally {
      await close();
    }
  });
});
