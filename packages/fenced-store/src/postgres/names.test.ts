import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
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

const f = (resource: string, token: bigint): Fence => ({ resource, token, holder: "h" });

/** Every operation of the store, on `key`; returns what it read back. */
async function everyOperation(store: FencedPostgres, key: string) {
  await store.register(f("r", 1n));
  const put = await store.put(key, { step: 1 }, { fence: f("r", 1n) });
  const cas = await store.put(key, { step: 2 }, { fence: f("r", 1n), ifVersion: put.version });
  const read = await store.get(key);
  const moved = await store.transfer(key, { from: f("r", 1n), to: f("r2", 1n), ifVersion: cas.version });
  const inTx = await store.transaction(f("r2", 1n), async (client) => {
    const { rows } = await client.query<{ n: number }>({ text: `SELECT count(*)::int AS n FROM "${store.schema}".records` });
    return rows[0]?.n;
  });
  const deleted = await store.delete(key, { fence: f("r2", 1n), ifVersion: moved?.version ?? "" });
  await store.put(key, { step: 3 }, { fence: f("r2", 1n) });
  const deletedAgain = await store.delete(key, { fence: f("r2", 1n) });
  const tombstone = (await h.recordRow(store, key))?.version;
  return {
    read: read?.value,
    owner: (await h.recordRow(store, key))?.resource,
    inTx,
    deleted: deleted.token,
    deletedAgain: deletedAgain.version === tombstone,
    after: await store.get(key),
  };
}

describe("FencedPostgres: prepared statement names fit PostgreSQL's 63-byte identifiers", () => {
  it("a 63-character schema: every operation works", async () => {
    const schema = `t${"x".repeat(54)}${process.pid.toString(36).padStart(8, "0")}`.slice(0, 63);
    expect(schema).toHaveLength(63);
    await h.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    try {
      const store = new FencedPostgres(h.pool, { schema });
      await store.migrate();
      await store.migrate();
      expect(await everyOperation(store, "k")).toEqual({
        read: { step: 2 },
        owner: "r2",
        inTx: 1,
        deleted: 1n,
        deletedAgain: true,
        after: undefined,
      });
    } finally {
      await h.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });

  it("two stores whose long schemas share a prefix, on one connection, never run each other's statements", async () => {
    const prefix = `t_${process.pid}_${"p".repeat(63)}`.slice(0, 60);
    const schemas = [`${prefix}_aa`, `${prefix}_bb`];
    // One connection: prepared statements are per session, so this is where names would collide.
    const pool = new pg.Pool({ connectionString: h.url, max: 1 });
    try {
      for (const schema of schemas) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      const [a, b] = schemas.map((schema) => new FencedPostgres(pool, { schema }));
      if (a === undefined || b === undefined) throw new Error("two stores");
      await a.migrate();
      await b.migrate();
      // Interleaved on the one connection: each store's statements must reach its own schema.
      await a.put("k", "in a", { fence: f("r", 1n) });
      await b.put("k", "in b", { fence: f("r", 1n) });
      expect(await a.get("k")).toMatchObject({ value: "in a" });
      expect(await b.get("k")).toMatchObject({ value: "in b" });
      expect(await everyOperation(a, "all")).toEqual({
        read: { step: 2 },
        owner: "r2",
        inTx: 2,
        deleted: 1n,
        deletedAgain: true,
        after: undefined,
      });
      expect(await everyOperation(b, "all")).toEqual({
        read: { step: 2 },
        owner: "r2",
        inTx: 2,
        deleted: 1n,
        deletedAgain: true,
        after: undefined,
      });
      const { rows } = await pool.query<{ name: string }>("SELECT name FROM pg_prepared_statements");
      for (const { name } of rows) expect(Buffer.byteLength(name)).toBeLessThanOrEqual(63);
      expect(new Set(rows.map((r) => r.name)).size).toBe(rows.length);
    } finally {
      for (const schema of schemas) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    }
  });
});
