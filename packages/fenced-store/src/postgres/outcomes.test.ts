import { InvalidArgumentError } from "@fenced/fence";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutcomeUnknownError, StoreSetupError, StoreUnavailableError } from "../errors.js";
import { COMMIT_MESSAGE, CutProxy, SYNC_MESSAGE } from "./cut-proxy-test-support.js";
import { timed } from "./fault-test-support.js";
import { Calls } from "./calls.js";
import { quoteSchema, statements } from "./sql.js";
import { FencedPostgres } from "./store.js";
import { fenceAt as f, outcome, pgHarness, type PgHarness } from "./test-support.js";

// What each failure of the database becomes, on a healthy server: an answer lost after COMMIT, the
// store's deadline (the pool's wait, the caller's callback, the server's statement_timeout), tables
// that were never created, and what passes through unchanged.

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

/** A pool whose connections go through a proxy that can lose one answer, and a store on it in `schema`. */
async function throughProxy(schema: string): Promise<{ proxy: CutProxy; pool: pg.Pool; store: FencedPostgres; close(): Promise<void> }> {
  const url = new URL(h.url);
  const proxy = await CutProxy.start({ host: url.hostname, port: Number(url.port) });
  url.host = `127.0.0.1:${proxy.port}`;
  const pool = new pg.Pool({ connectionString: url.toString(), max: 2 });
  pool.on("error", () => undefined);
  const store = new FencedPostgres(pool, { schema, timeoutMs: 2_000 });
  return {
    proxy,
    pool,
    store,
    async close() {
      await pool.end();
      await proxy.close();
    },
  };
}

describe("FencedPostgres: a write whose answer is lost is OutcomeUnknownError", () => {
  it("transaction() and delete(): the COMMIT reached the server, its answer did not; the writes landed", async () => {
    const seed = await h.store("lost_commit");
    await seed.put("k", "v", { fence: f("r", 1n) });
    const via = await throughProxy(seed.schema);
    try {
      via.proxy.arm(COMMIT_MESSAGE);
      const tx = await outcome(via.store.transaction(f("r", 2n), () => Promise.resolve("done")));
      expect(tx).toBeInstanceOf(OutcomeUnknownError);
      expect(tx).toMatchObject({ backend: "postgres", key: undefined, operation: "transaction" });
      expect(await h.fenceToken(seed, "r")).toBe(2n); // it was applied all the same

      via.proxy.arm(COMMIT_MESSAGE);
      const deleted = await outcome(via.store.delete("k", { fence: f("r", 3n) }));
      expect(deleted).toMatchObject({ name: "OutcomeUnknownError", key: "k", operation: "delete" });
      expect(await seed.get("k")).toBeUndefined();
      expect(via.proxy.cuts).toBe(2);

      // A retry with the same fence is judged by the ratchet like any write: admitted again (same holder and token).
      await via.store.put("k", "again", { fence: f("r", 3n) });
      expect(await seed.get("k")).toMatchObject({ value: "again", token: 3n });
    } finally {
      await via.close();
    }
  });

  it("put() refused as out of order, then sent unordered: its zero-row answer came, the answer to its Sync was cut: nothing applied, StoreUnavailableError", async () => {
    const seed = await h.store("lost_empty_sync");
    const via = await throughProxy(seed.schema);
    try {
      await seed.put("k", { n: 0 }, { fence: f("r", 1n) });
      // The unordered statement, called as put() calls it after an out-of-order refusal, on a fence row
      // another fence holds: no row back; then its Sync's answer is lost.
      await seed.register(f("r", 2n));
      const calls = new Calls(via.pool, 2_000, statements(quoteSchema(seed.schema)));
      via.proxy.arm(SYNC_MESSAGE);
      const err = await outcome(
        calls.session({ operation: "put", key: "k" }, undefined, (s) =>
          calls.write(s, "putShared", ["r", "1", null, "k", JSON.stringify({ n: 1 })]),
        ),
      );
      expect(err).toBeInstanceOf(StoreUnavailableError);
      expect(err).toMatchObject({ reason: "connection", operation: "put" });
      expect(via.proxy.cuts).toBe(1);
      expect(await seed.get("k")).toMatchObject({ value: { n: 0 } });
    } finally {
      await via.close();
    }
  });

  it("put(): refused as out of order, sent unordered, its statement ran and the answer was cut before its commit (Sync) was sent: nothing applied", async () => {
    const seed = await h.store("lost_put");
    const via = await throughProxy(seed.schema);
    try {
      // Written at this fence by another store: `via` has not seen it, so its put is refused as out of
      // order (it may be late) and sent again unordered, committed only after its answer.
      const v0 = await seed.put("k", { n: 0 }, { fence: f("r", 1n) });
      via.proxy.arm(Buffer.from("fenced:putShared:"));
      const err = await outcome(via.store.put("k", { n: 1 }, { fence: f("r", 1n) }));
      expect(err).toBeInstanceOf(StoreUnavailableError);
      expect(err).toMatchObject({ reason: "connection", operation: "put" });
      expect(await seed.get("k")).toMatchObject({ value: { n: 0 }, version: v0.version });
      // Cut after its row arrived, before its CommandComplete: the Sync is sent only from pg's
      // CommandComplete handler, so it was not sent either.
      const v1 = await seed.put("k", { n: 2 }, { fence: f("r", 1n) });
      via.proxy.arm(Buffer.from("fenced:putShared:"), { afterRow: true });
      const afterRow = await outcome(via.store.put("k", { n: 3 }, { fence: f("r", 1n) }));
      expect(via.proxy.cuts).toBe(2);
      expect(afterRow).toBeInstanceOf(StoreUnavailableError);
      expect(await seed.get("k")).toMatchObject({ value: { n: 2 }, version: v1.version });
    } finally {
      await via.close();
    }
  });

  it("put(): sent ordered with its commit, the answer cut: OutcomeUnknownError, it landed; the store's next put of the key is refused as out of order and sent unordered", async () => {
    const seed = await h.store("lost_ordered");
    const via = await throughProxy(seed.schema);
    try {
      await via.store.put("k", { n: 1 }, { fence: f("r", 1n) });
      via.proxy.arm(SYNC_MESSAGE);
      const lost = await outcome(via.store.put("k", { n: 2 }, { fence: f("r", 1n) }));
      expect(lost).toBeInstanceOf(OutcomeUnknownError);
      expect(lost).toMatchObject({ key: "k", operation: "put" });
      expect(await seed.get("k")).toMatchObject({ value: { n: 2 }, token: 1n });
      const next = await via.store.put("k", { n: 3 }, { fence: f("r", 1n) });
      expect(await via.store.get("k")).toMatchObject({ value: { n: 3 }, version: next.version });
    } finally {
      await via.close();
    }
  });
});

describe("FencedPostgres: a statement not sent is nothing applied", () => {
  it("a put's next statement on a connection the server terminated between two statements: not sent, StoreUnavailableError", async () => {
    const seed = await h.store("not_sent");
    const pool = new pg.Pool({ connectionString: h.url, max: 1 });
    const admin = new pg.Pool({ connectionString: h.url, max: 1 });
    pool.on("error", () => undefined);
    try {
      await seed.put("k", { n: 0 }, { fence: f("r", 1n) });
      const calls = new Calls(pool, 2_000, statements(quoteSchema(seed.schema)));
      const err = await outcome(
        calls.session({ operation: "put", key: "k" }, undefined, async (s) => {
          const { rows } = await s.query<{ pid: number }>({ text: "SELECT pg_backend_pid() AS pid" }, "read");
          // The server ends the session while the store holds it between two statements: pg emits 'error'.
          const ended = new Promise((resolve) => s.client.once("error", resolve));
          await admin.query("SELECT pg_terminate_backend($1)", [rows[0]?.pid]);
          await ended;
          // The ordered put, whose commit would leave with it: never sent, so judged a read's (failures.ts, failedIn).
          return calls.write(s, "putOrdered", ["r", "1", null, "k", JSON.stringify({ n: 1 }), "0"]);
        }),
      );
      expect(err).toBeInstanceOf(StoreUnavailableError);
      expect(err).toMatchObject({ reason: "connection", operation: "put", applied: "no" });
      expect(await seed.get("k")).toMatchObject({ value: { n: 0 } });
    } finally {
      await pool.end();
      await admin.end();
    }
  });
});

describe("FencedPostgres: deadlines", () => {
  it("timeoutMs is whole milliseconds from 100 to 600000, default 5000", () => {
    expect(new FencedPostgres(h.pool).timeoutMs).toBe(5_000);
    expect(new FencedPostgres(h.pool, { timeoutMs: 100 }).timeoutMs).toBe(100);
    expect(new FencedPostgres(h.pool, { timeoutMs: 600_000 }).timeoutMs).toBe(600_000);
    for (const bad of [0, 99, 100.5, 600_001, -1, Number.NaN, Number.POSITIVE_INFINITY, "5000", null]) {
      const build = () => new FencedPostgres(h.pool, { timeoutMs: bad as number });
      expect(build).toThrow(InvalidArgumentError);
      expect(build).toThrow(/options\.timeoutMs: .*milliseconds/);
    }
  });

  it("a pool with every client taken: the wait is bounded, and the client that frees up later is not kept", async () => {
    const seed = await h.store("exhausted");
    const pool = new pg.Pool({ connectionString: h.url, max: 1 });
    pool.on("error", () => undefined);
    try {
      // The wait outlasts any deadline (the client is taken until after it); the get at the end must end
      // within it, which a few hundred milliseconds could fail to on a busy machine.
      const timeoutMs = 1_000;
      const store = new FencedPostgres(pool, { schema: seed.schema, timeoutMs });
      const taken = await pool.connect();
      const { ms, value } = await timed(store.get("k"));
      expect(value).toBeInstanceOf(StoreUnavailableError);
      expect(value).toMatchObject({ reason: "timeout", operation: "get" });
      expect(ms).toBeLessThan(timeoutMs + 500);
      taken.release();
      // Back in the pool, idle: a client kept for the call that gave up would never be.
      await expect
        .poll(() => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }), { timeout: 5_000 })
        .toEqual({ total: 1, idle: 1, waiting: 0 });
      expect(await store.get("k")).toBeUndefined();
    } finally {
      await pool.end();
    }
  });

  it("transaction(): the deadline covers the callback; the server gives up too, so the fence row is free again", async () => {
    const seed = await h.store("slow_tx");
    const store = new FencedPostgres(h.pool, { schema: seed.schema, timeoutMs: 500 });
    const slept = await timed(store.transaction(f("r", 1n), (c) => c.query("SELECT pg_sleep(30)")));
    expect(slept.value).toBeInstanceOf(StoreUnavailableError);
    expect(slept.value).toMatchObject({ reason: "timeout", operation: "transaction" });
    expect(slept.ms).toBeLessThan(1_000);
    // Without the server's statement_timeout its backend would sleep on, holding the fence row for 30 s.
    const next = await timed(seed.put("k", 1, { fence: f("r", 2n) }));
    expect(next.value).toMatchObject({ token: 2n });
    expect(next.ms).toBeLessThan(1_500);
    expect(await h.fenceToken(seed, "r")).toBe(2n);

    // A callback that never settles: the call still ends at the deadline.
    const hung = await timed(store.transaction(f("r", 3n), () => new Promise<never>(() => undefined)));
    expect(hung.value).toMatchObject({ name: "StoreUnavailableError", reason: "timeout" });
    expect(hung.ms).toBeLessThan(1_000);
    expect(await h.fenceToken(seed, "r")).toBe(2n);
  });

  it("transaction(): the server's statement_timeout is set for the transaction only", async () => {
    const seed = await h.store("local_timeout");
    const store = new FencedPostgres(h.pool, { schema: seed.schema, timeoutMs: 3_000 });
    const inside = await store.transaction(f("r", 1n), async (c) => {
      const { rows } = await c.query<{ ms: string }>("SELECT current_setting('statement_timeout') AS ms");
      return rows[0]?.ms ?? "";
    });
    expect(inside).toMatch(/^\d+ms$|^\d+s$/);
    const ms = inside.endsWith("ms") ? Number(inside.slice(0, -2)) : Number(inside.slice(0, -1)) * 1_000;
    expect(ms).toBeGreaterThan(2_000);
    expect(ms).toBeLessThanOrEqual(3_000);
    const client = await h.pool.connect();
    try {
      for (let i = 0; i < 3; i++) expect((await client.query("SHOW statement_timeout")).rows[0]).toEqual({ statement_timeout: "0" });
    } finally {
      client.release();
    }
  });

  it("an error the callback throws passes through unchanged, its own SQL errors included", async () => {
    const store = await h.store("passthrough");
    const mine = new Error("mine");
    expect(await outcome(store.transaction(f("r", 1n), () => Promise.reject(mine)))).toBe(mine);
    const sqlError = await outcome(store.transaction(f("r", 1n), (c) => c.query("SELECT * FROM no_such_table_of_the_caller")));
    expect(sqlError).not.toBeInstanceOf(StoreSetupError);
    expect(sqlError).toMatchObject({ code: "42P01" });
    expect(await h.counts(store)).toEqual({ fence: 0, records: 0 });
  });
});

describe("FencedPostgres: migrate() forgotten", () => {
  it("every operation fails with StoreSetupError not-migrated, whether the schema, a table or a function is missing", async () => {
    const store = new FencedPostgres(h.pool, { schema: `t_unmigrated_${process.pid}` });
    const calls = (s: FencedPostgres) => [
      s.get("k"),
      s.put("k", 1, { fence: f("r", 1n) }),
      s.put("k", 1, { fence: f("r", 1n), ifVersion: "1" }),
      s.delete("k", { fence: f("r", 1n) }),
      s.register(f("r", 1n)),
      s.transfer("k", { from: f("r", 1n), to: f("s", 1n) }),
      s.transaction(f("r", 1n), () => Promise.resolve()),
    ];
    for (const err of await Promise.all(calls(store).map(outcome))) {
      expect(err).toBeInstanceOf(StoreSetupError);
      expect(err).toMatchObject({ backend: "postgres", problem: "not-migrated" });
      expect((err as Error).message).toContain("run migrate()");
    }
    const partial = await h.store("partial");
    await h.pool.query(`DROP TABLE "${partial.schema}".records`);
    expect(await outcome(partial.get("k"))).toMatchObject({ name: "StoreSetupError", problem: "not-migrated" });
    await partial.migrate();
    const v = await partial.put("k", 1, { fence: f("r", 1n) });
    await h.pool.query(`DROP FUNCTION "${partial.schema}".refuse_conditional_write`);
    // Each call's outcome is taken as it is made: a rejection is never left unhandled while another is awaited.
    const refused = await Promise.all(
      [partial.put("k", 2, { fence: f("r", 1n), ifVersion: v.version }), partial.put("k", 2, { fence: f("r", 1n) })].map(outcome),
    );
    for (const err of refused) expect(err).toMatchObject({ name: "StoreSetupError", problem: "not-migrated" });
  });
});
