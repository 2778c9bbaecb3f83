import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError } from "../errors.js";
import type { Fence } from "../fence.js";
import { FencedPostgres } from "./store.js";
import { pgHarness, type PgHarness } from "./test-support.js";

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

const lease = (token: bigint, holder?: string): Fence =>
  holder === undefined ? { resource: "orders", token } : { resource: "orders", token, holder };

/** Everything a refused write could have changed: the record and the fence row, as stored. */
async function snapshot(store: FencedPostgres, key: string) {
  return { record: await h.recordRow(store, key), fence: await h.fenceRow(store, "orders"), counts: await h.counts(store) };
}

describe("FencedPostgres: the holder decides equal tokens", () => {
  // A lock whose counters were set back (a wiped node, a failover to a lagging replica) hands token 4
  // to a second lease. Storage that accepted "token >= highest" would take both leases' writes.
  it("counters reset so the lock repeats token 4: the second lease (another holder) is refused and changes nothing; the first writes on", async () => {
    const store = await h.store("repeat");
    const first = await store.put("invoice", { by: "h1" }, { fence: lease(4n, "h1") });
    const before = await snapshot(store, "invoice");
    expect(before.fence).toEqual({ token: 4n, holder: "h1" });
    expect(before.record).toMatchObject({ value: { by: "h1" }, token: 4n, holder: "h1", resource: "orders", version: first.version });

    const refusals = [
      () => store.put("invoice", { by: "h2" }, { fence: lease(4n, "h2") }),
      () => store.put("invoice", { by: "h2" }, { fence: lease(4n, "h2"), ifVersion: first.version }),
      () => store.put("other", { by: "h2" }, { fence: lease(4n, "h2") }),
      () => store.delete("invoice", { fence: lease(4n, "h2") }),
      () => store.delete("invoice", { fence: lease(4n, "h2"), ifVersion: first.version }),
      () => store.register(lease(4n, "h2")),
      () => store.transaction(lease(4n, "h2"), () => Promise.resolve()),
      // A fence without a holder is another lease too: it is not the one that presented token 4.
      () => store.put("invoice", { by: "nobody" }, { fence: lease(4n) }),
    ];
    for (const [i, refused] of refusals.entries()) {
      const err = await refused().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, `refusal #${i}`).toBeInstanceOf(StaleTokenError);
      expect(err, `refusal #${i}`).toMatchObject({ resource: "orders", token: 4n, highest: 4n, highestHolder: "h1", code: "STALE_TOKEN" });
      expect(await snapshot(store, "invoice"), `refusal #${i}`).toEqual(before);
    }

    const again = await store.put("invoice", { by: "h1 again" }, { fence: lease(4n, "h1") });
    expect(await store.get("invoice")).toEqual({
      value: { by: "h1 again" },
      version: again.version,
      token: 4n,
      resource: "orders",
      holder: "h1",
    });
    await store.register(lease(4n, "h1"));
    expect(await h.fenceRow(store, "orders")).toEqual({ token: 4n, holder: "h1" });
  });

  it("a higher token from any holder is accepted and becomes the holder of the highest; the old holder is then stale", async () => {
    const store = await h.store("higher");
    await store.put("k", 1, { fence: lease(4n, "h1") });
    await store.put("k", 2, { fence: lease(5n, "h2") });
    expect(await h.fenceRow(store, "orders")).toEqual({ token: 5n, holder: "h2" });
    expect(await store.get("k")).toMatchObject({ value: 2, token: 5n, holder: "h2" });
    await expect(store.put("k", 3, { fence: lease(4n, "h1") })).rejects.toMatchObject({
      name: "StaleTokenError",
      token: 4n,
      highest: 5n,
      highestHolder: "h2",
    });
    await expect(store.put("k", 3, { fence: lease(5n, "h1") })).rejects.toMatchObject({
      name: "StaleTokenError",
      token: 5n,
      highest: 5n,
      highestHolder: "h2",
    });
  });

  it("fences without a holder are identified by their token alone", async () => {
    const store = await h.store("holderless");
    await store.register(lease(7n));
    await store.put("k", "a", { fence: lease(7n) });
    await store.put("k", "b", { fence: lease(7n) });
    expect(await store.get("k")).toMatchObject({ value: "b", token: 7n, holder: null });
    expect(await h.fenceRow(store, "orders")).toEqual({ token: 7n, holder: null });
    // A lease with a holder is not the holderless fence that presented 7.
    await expect(store.put("k", "c", { fence: lease(7n, "h1") })).rejects.toMatchObject({
      name: "StaleTokenError",
      highest: 7n,
      highestHolder: null,
    });
    expect(await store.get("k")).toMatchObject({ value: "b", holder: null });
  });

  it("a transaction's fence is held by its holder: an equal token from another holder waits for it, then is refused", async () => {
    const store = await h.store("tx_holder");
    await store.transaction(lease(9n, "h1"), async (client) => {
      await client.query({ text: "SELECT 1" });
    });
    await expect(store.transaction(lease(9n, "h2"), () => Promise.resolve("ran"))).rejects.toMatchObject({
      name: "StaleTokenError",
      highestHolder: "h1",
    });
    expect(await store.transaction(lease(9n, "h1"), () => Promise.resolve("ran"))).toBe("ran");
  });
});

describe("FencedPostgres: migrate() upgrades a store created by the previous layout", () => {
  it("adds the holder columns and tombstone support; existing rows keep working", async () => {
    const schema = `t_upgrade_${process.pid}`;
    await h.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    try {
      // The layout before holders and tombstones, as earlier versions of migrate() created it.
      await h.pool.query(`
        CREATE SCHEMA "${schema}";
        CREATE TABLE "${schema}".fence (resource text PRIMARY KEY, token bigint NOT NULL CHECK (token >= 0));
        CREATE SEQUENCE "${schema}".record_version AS bigint;
        CREATE TABLE "${schema}".records (key text PRIMARY KEY, value jsonb NOT NULL, version bigint NOT NULL DEFAULT nextval('"${schema}".record_version'),
          token bigint NOT NULL CHECK (token >= 0), resource text NOT NULL);
        INSERT INTO "${schema}".fence VALUES ('orders', 3);
        INSERT INTO "${schema}".records (key, value, token, resource) VALUES ('old', '{"kept": true}', 3, 'orders');
      `);
      const store = new FencedPostgres(h.pool, { schema });
      await Promise.all([store.migrate(), store.migrate()]);
      await store.migrate();
      expect(await store.get("old")).toMatchObject({ value: { kept: true }, token: 3n, resource: "orders", holder: null });
      expect(await h.fenceRow(store, "orders")).toEqual({ token: 3n, holder: null });
      // Rows written before the upgrade name no holder: an equal token with a holder is another lease.
      await expect(store.put("old", 1, { fence: lease(3n, "h1") })).rejects.toBeInstanceOf(StaleTokenError);
      await store.put("old", { v: 2 }, { fence: lease(4n, "h1") });
      expect(await store.get("old")).toMatchObject({ value: { v: 2 }, holder: "h1" });
      expect((await store.delete("old", { fence: lease(4n, "h1") })).token).toBe(4n);
      expect(await store.get("old")).toBeUndefined();
      await expect(store.put("old", 3, { fence: { resource: "elsewhere", token: 0n } })).rejects.toMatchObject({
        name: "ResourceMismatchError",
        owner: "orders",
      });
    } finally {
      await h.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });
});
