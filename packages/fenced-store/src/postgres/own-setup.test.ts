import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError } from "../errors.js";
import { countedStore, sentBy } from "./counted-test-support.js";
import { FencedPostgres } from "./store.js";
import { copyAndRow, lockWaiters } from "./own-test-support.js";
import { fenceAt as f, outcome, pgHarness, type PgHarness } from "./test-support.js";

// The fence copy's set-up (schema-sql.ts, COPY_TRIGGERS; PROTOCOL.md, "The one-row path"): what
// migrate() and verify() do with its columns and triggers, and the isolation levels it must hold at.

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

/** A client of the test's own, connected. */
async function client(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: h.url });
  await c.connect();
  return c;
}

describe("FencedPostgres: the fence copy's set-up", () => {
  it("verify() refuses a schema whose copy trigger is missing or not enabled ALWAYS, naming the fix; migrate() restores both and forgets the copies a raise left behind meanwhile", async () => {
    const store = await h.store("own_triggers");
    await store.verify();
    let token = 1n;
    for (const [damage, says] of [
      [`DROP TRIGGER fence_copy ON "${store.schema}".fence`, /fence_copy .* missing/],
      [`ALTER TABLE "${store.schema}".records DISABLE TRIGGER fence_copy_owner`, /fence_copy_owner .* not enabled ALWAYS/],
      [`ALTER TABLE "${store.schema}".fence ENABLE TRIGGER fence_copy`, /fence_copy .* not enabled ALWAYS/],
    ] as const) {
      const old = f("r", token, `h${token}`);
      await store.put("r", "v", { fence: old });
      await store.put("r", "v", { fence: old }); // the copy is at the old lease's fence
      await h.pool.query(damage);
      const refused = await outcome(new FencedPostgres(h.pool, { schema: store.schema }).verify());
      expect(refused, damage).toMatchObject({ name: "StoreSetupError", problem: "not-migrated" });
      expect((refused as Error).message, damage).toMatch(says);
      // A raise while the fence_copy trigger does not fire (replica sessions are what a disabled-for-origin trigger skips).
      const raiser = await client();
      try {
        await raiser.query("SET session_replication_role = replica");
        token++;
        await raiser.query(`UPDATE "${store.schema}".fence SET token = $1, holder = $2 WHERE resource = 'r'`, [token, `h${token}`]);
      } finally {
        await raiser.end();
      }
      await store.migrate();
      await store.verify();
      expect(await copyAndRow(h.pool, store, "r"), damage).toMatchObject({ copy: null, token: String(token) });
      expect(await outcome(store.put("r", "stale", { fence: old })), damage).toBeInstanceOf(StaleTokenError);
    }
  });

  it("REPEATABLE READ: a raise whose snapshot cannot see the record a writer at the old fence committed while it waited fails as a serialization failure, and leaves the fence row as it was", async () => {
    const seed = await h.store("own_repeatable");
    const rr = new pg.Pool({ connectionString: h.url, max: 1 });
    rr.on("connect", (c) => void c.query("SET default_transaction_isolation = 'repeatable read'"));
    const blocker = await client();
    try {
      const raising = new FencedPostgres(rr, { schema: seed.schema });
      const old = f("r", 1n, "h1");
      await seed.register(old);
      // A transaction of the test's own inserts key r and holds it, so the old lease's first write of
      // r waits on it — holding r's fence lock shared and its fence row FOR SHARE (the shared path).
      await blocker.query("BEGIN");
      await blocker.query(`INSERT INTO "${seed.schema}".records (key, value, token, resource) VALUES ('r', '0', 1, 'r')`);
      const first = seed.put("r", "v1", { fence: old });
      await expect.poll(() => lockWaiters(h.pool)).toBe(1);
      // The raise takes its snapshot, then queues for the fence lock.
      await raising.get("r"); // its connection, set to REPEATABLE READ, before the raise
      const raise = outcome(raising.register(f("r", 2n, "h2")));
      await expect.poll(() => lockWaiters(h.pool)).toBe(2);
      await blocker.query("ROLLBACK");
      await first; // record r committed, its copy at the old fence, after the raise's snapshot
      const failed = await raise;
      expect(failed).toMatchObject({ code: "40001" });
      expect(await copyAndRow(h.pool, seed, "r")).toEqual({ copy: "1", copyHolder: "h1", token: "1", holder: "h1" });
      // Again, in a new transaction: its snapshot sees record r, and the copy moves with the fence row.
      await raising.register(f("r", 2n, "h2"));
      expect(await copyAndRow(h.pool, seed, "r")).toEqual({ copy: "2", copyHolder: "h2", token: "2", holder: "h2" });
      expect(await outcome(seed.put("r", "stale", { fence: old }))).toBeInstanceOf(StaleTokenError);
    } finally {
      await blocker.end();
      await rr.end();
    }
  });

  it("migrate() adding the copy to a layout from before it, while a writer of that layout is between its ratchet and its record: neither deadlocks", async () => {
    const seed = await h.store("own_upgrade_order");
    await seed.put("k", "v", { fence: f("r", 1n, "h1") });
    await h.pool.query(`DROP TRIGGER fence_copy ON "${seed.schema}".fence; DROP TRIGGER fence_copy_owner ON "${seed.schema}".records;
      ALTER TABLE "${seed.schema}".records DROP COLUMN fence_token, DROP COLUMN fence_holder`);
    const writer = await client();
    try {
      // A delete as the code before the copy sends it: BEGIN, the ratchet (fence), then the tombstone (records).
      await writer.query("BEGIN");
      await writer.query(
        `INSERT INTO "${seed.schema}".fence AS f (resource, token, holder) VALUES ('r', 1, 'h1')
         ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, holder = EXCLUDED.holder
         WHERE f.token < EXCLUDED.token OR (f.token = EXCLUDED.token AND f.holder IS NOT DISTINCT FROM EXCLUDED.holder)`,
      );
      const migrating = outcome(new FencedPostgres(h.pool, { schema: seed.schema }).migrate());
      await expect.poll(() => lockWaiters(h.pool)).toBe(1);
      const tombstone = await outcome(
        writer.query(
          `UPDATE "${seed.schema}".records SET value = NULL, version = nextval('"${seed.schema}".record_version') WHERE key = 'k' AND resource = 'r'`,
        ),
      );
      expect(tombstone).toMatchObject({ rowCount: 1 });
      await writer.query("COMMIT");
      expect(await migrating).toBeUndefined();
      await seed.verify();
    } finally {
      await writer.end();
    }
  });

  it("a session with session_replication_role = replica, which skips ordinary triggers, still keeps the copy", async () => {
    const store = await h.store("own_replica");
    const old = f("r", 1n, "h1");
    await store.put("r", "v1", { fence: old });
    const replica = await client();
    try {
      await replica.query("SET session_replication_role = replica");
      await replica.query(`UPDATE "${store.schema}".fence SET token = 2, holder = 'h2' WHERE resource = 'r'`);
    } finally {
      await replica.end();
    }
    expect(await copyAndRow(h.pool, store, "r")).toEqual({ copy: "2", copyHolder: "h2", token: "2", holder: "h2" });
    expect(await outcome(store.put("r", "stale", { fence: old }))).toBeInstanceOf(StaleTokenError);
  });

  it("a layout from before the copy: migrate() adds its columns and triggers; a record without a copy is written by the fence-row path, which sets it", async () => {
    const seed = await h.store("own_upgrade");
    const lease = f("r", 1n, "h1");
    await seed.put("r", "before", { fence: lease });
    await h.pool.query(`DROP TRIGGER fence_copy ON "${seed.schema}".fence; DROP TRIGGER fence_copy_owner ON "${seed.schema}".records;
      ALTER TABLE "${seed.schema}".records DROP COLUMN fence_token, DROP COLUMN fence_holder`);
    const via = await countedStore(h.url, seed.schema);
    try {
      expect(await outcome(via.store.verify())).toMatchObject({ name: "StoreSetupError", problem: "not-migrated" });
      expect(await outcome(via.store.put("r", "x", { fence: lease }))).toMatchObject({ name: "StoreSetupError", problem: "not-migrated" });
      await via.store.migrate();
      await via.store.verify();
      expect(await copyAndRow(h.pool, seed, "r")).toMatchObject({ copy: null, token: "1" });
      await via.store.get("r"); // the version written before: what this store's put comes after
      expect((await sentBy(via.sent, () => via.store.put("r", "after", { fence: lease }))).statements).toEqual([
        "putOwn",
        "putOrderedShared",
      ]);
      expect(await copyAndRow(h.pool, seed, "r")).toEqual({ copy: "1", copyHolder: "h1", token: "1", holder: "h1" });
      expect((await sentBy(via.sent, () => via.store.put("r", "steady", { fence: lease }))).statements).toEqual(["putOwn"]);
    } finally {
      await via.close();
    }
  });
});
