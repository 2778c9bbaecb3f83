import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countedStore, sentBy } from "./counted-test-support.js";
import { StoreSetupError } from "../errors.js";
import { FencedPostgres } from "./store.js";
import { fenceAt as f, outcome, pgHarness, type PgHarness } from "./test-support.js";

describe("unconditional puts of one key at once, one store, one fence", () => {
  let h: PgHarness;
  beforeAll(async () => {
    h = await pgHarness();
  });
  afterAll(async () => {
    await h.close();
  });

  it("all land: those refused as out of order (they came after the same version) are sent again unordered", async () => {
    const store = await h.store("same_key_at_once");
    const fence = f("r", 1n, "h1");
    await store.put("k", -1, { fence });
    const results = await Promise.all(Array.from({ length: 16 }, (_, i) => store.put("k", i, { fence })));
    const versions = results.map((r) => BigInt(r.version));
    expect(new Set(versions).size).toBe(16);
    const newest = versions.reduce((a, b) => (a > b ? a : b));
    const record = await store.get("k");
    expect(BigInt(record?.version ?? "0")).toBe(newest);
    expect(record?.value).toBe(versions.indexOf(newest));
  });

  it("migrate() puts back a version sequence someone altered: a per-session cache or a wrap-around would hand a later write a smaller version", async () => {
    const store = await h.store("sequence_shape");
    const shape = async (): Promise<unknown> =>
      (
        await h.pool.query(
          "SELECT increment_by::text AS increment, cache_size::text AS cache, cycle FROM pg_sequences WHERE schemaname = $1 AND sequencename = 'record_version'",
          [store.schema],
        )
      ).rows[0];
    expect(await shape()).toEqual({ increment: "1", cache: "1", cycle: false });
    await h.pool.query(`ALTER SEQUENCE "${store.schema}".record_version CACHE 100 CYCLE`);
    expect(await shape()).toEqual({ increment: "1", cache: "100", cycle: true });
    await store.migrate();
    expect(await shape()).toEqual({ increment: "1", cache: "1", cycle: false });
  });

  /** 20 puts over 3 keys, and the newest version of any record. */
  async function written(store: FencedPostgres): Promise<bigint> {
    const fence = f("r", 1n, "h1");
    for (let i = 0; i < 20; i++) await store.put(`k${i % 3}`, i, { fence });
    const { rows } = await h.pool.query<{ newest: string }>(`SELECT max(version)::text AS newest FROM "${store.schema}".records`);
    return BigInt(rows[0]?.newest ?? "0");
  }

  it("a version sequence set back (RESTART WITH 1) behind the records: verify() refuses it naming the fix, migrate() moves it past every record's version", async () => {
    const store = await h.store("sequence_restart");
    const newest = await written(store);
    expect(newest).toBeGreaterThanOrEqual(20n);
    await h.pool.query(`ALTER SEQUENCE "${store.schema}".record_version RESTART WITH 1`);
    // A new store instance (one restarted after the reset), as a gateway starts: verify() with --no-migrate, else migrate().
    const fresh = new FencedPostgres(h.pool, { schema: store.schema });
    const refused = await outcome(fresh.verify());
    expect(refused).toBeInstanceOf(StoreSetupError);
    expect(refused).toMatchObject({ problem: "not-migrated" });
    expect((refused as Error).message).toMatch(/migrate\(\).*setval/);
    await fresh.migrate();
    await fresh.verify();
    const fence = f("r", 1n, "h1");
    expect(BigInt((await fresh.put("k0", "after the reset", { fence })).version)).toBeGreaterThan(newest);
    expect(BigInt((await fresh.put("new", "after the reset", { fence })).version)).toBeGreaterThan(newest);
  });

  it("a version sequence dropped with CASCADE (its default gone with it): verify() refuses, migrate() restores the default and moves the sequence past every record's version", async () => {
    const store = await h.store("sequence_dropped");
    const newest = await written(store);
    await h.pool.query(`DROP SEQUENCE "${store.schema}".record_version CASCADE`);
    const fresh = new FencedPostgres(h.pool, { schema: store.schema });
    expect(await outcome(fresh.verify())).toMatchObject({ name: "StoreSetupError", problem: "not-migrated" });
    await fresh.migrate();
    await fresh.verify();
    const fence = f("r", 1n, "h1");
    // A new key takes the column's default; a key that exists draws in the update.
    const created = BigInt((await fresh.put("new", 1, { fence })).version);
    const updated = BigInt((await fresh.put("k1", 1, { fence })).version);
    expect(created).toBeGreaterThan(newest);
    expect(updated).toBeGreaterThan(created);
    // A sequence dropped and created again by hand, at 1, with the default back: moved past too.
    await h.pool.query(`ALTER SEQUENCE "${store.schema}".record_version RESTART WITH 1`);
    await fresh.migrate();
    expect(BigInt((await fresh.put("new", 2, { fence })).version)).toBeGreaterThan(updated);
  });
});

describe("the statements one put sends: one in the steady state, three at most", () => {
  let h: PgHarness;
  beforeAll(async () => {
    h = await pgHarness();
  });
  afterAll(async () => {
    await h.close();
  });

  const counted = (schema: string) => countedStore(h.url, schema);

  it("steady state, a new lease's first write, an out-of-order refusal, a key of another resource, and the worst case: a raise between every two of them", async () => {
    const seed = await h.store("statements");
    const via = await counted(seed.schema);
    try {
      const lease = f("r", 1n, "h1");
      await via.store.put("k", 0, { fence: lease });
      // The steady state: one statement, its commit with it.
      expect((await sentBy(via.sent, () => via.store.put("k", 1, { fence: lease }))).statements).toEqual(["putOrderedShared"]);
      // A new lease's first write: the shared statement finds the older fence, then the raise.
      const next = f("r", 2n, "h2");
      expect((await sentBy(via.sent, () => via.store.put("k", 2, { fence: next }))).statements).toEqual(["putOrderedShared", "putOrdered"]);
      // Written at this fence by another store: refused as out of order, then sent unordered.
      await seed.put("k", 3, { fence: next });
      expect((await sentBy(via.sent, () => via.store.put("k", 4, { fence: next }))).statements).toEqual(["putOrderedShared", "putShared"]);
      // A key of another resource: refused by the first statement, which ends the put.
      await seed.put("theirs", 0, { fence: f("s", 1n, "x") });
      const foreign = await sentBy(via.sent, () => via.store.put("theirs", 1, { fence: next }));
      expect(foreign.value).toMatchObject({ name: "ResourceMismatchError", owner: "s" });
      expect(foreign.statements).toEqual(["putOrderedShared"]);

      // The worst case: the shared statement finds an older fence; the newer lease raises and writes the
      // key before the raise arrives, which is then refused as out of order; another raise before the
      // unordered statement arrives, which finds the fence stale.
      const third = f("r", 3n, "h3");
      via.proxy.holdFrom(Buffer.from("fenced:putOrdered:"));
      const worst = sentBy(via.sent, () => via.store.put("k", 5, { fence: third }));
      await expect.poll(() => via.sent.at(-1)).toBe("putOrdered");
      await seed.put("k", 6, { fence: third });
      via.proxy.holdFrom(Buffer.from("fenced:putShared:"));
      via.proxy.deliver();
      await expect.poll(() => via.sent.at(-1)).toBe("putShared");
      await seed.register(f("r", 4n, "h4"));
      via.proxy.deliver();
      const { value, statements } = await worst;
      expect(value).toMatchObject({ name: "StaleTokenError", token: 3n, highest: 4n });
      // Three writes, and the read of the fence row for the error.
      expect(statements).toEqual(["putOrderedShared", "putOrdered", "putShared", "highest"]);
      expect(await seed.get("k")).toMatchObject({ value: 6 });
    } finally {
      await via.close();
    }
  });
});
