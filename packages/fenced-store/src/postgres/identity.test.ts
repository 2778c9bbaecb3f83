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

// The rule itself (another holder at an equal token is refused on every call) is the conformance
// suite's (../conformance/rules-test-support.ts); here, what PostgreSQL adds: a transaction holding its fence.
describe("FencedPostgres: the holder decides equal tokens", () => {
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
