import { EventEmitter } from "node:events";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StoreUnavailableError } from "../errors.js";
import { Session } from "./session.js";
import { FencedPostgres } from "./store.js";
import { fenceAt as f, outcome, pgHarness, type PgHarness, sleep } from "./test-support.js";
import type { PgClient, PgPool, PgQueryConfig, PgQueryResult } from "./types.js";

// An error thrown by transaction()'s callback is the caller's, judged when it was thrown: what
// happens to the ROLLBACK after it (the deadline passing, the client failing) does not change it.
// And a connection the store gave up on is never handed back to the pool.

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

/** A client of the harness's pool that holds every ROLLBACK back for `delayMs`, and can be made to emit 'error' when it sends one. */
type Wrapped = PgClient & {
  on(event: "error", l: (err: Error) => void): unknown;
  removeListener(event: "error", l: (err: Error) => void): unknown;
};

function slowRollbackPool(pool: pg.Pool, delayMs: number, emitError = false): PgPool<Wrapped> {
  return {
    query: <R>(config: PgQueryConfig): Promise<PgQueryResult<R>> => pool.query<R & pg.QueryResultRow>(config),
    connect: async (): Promise<Wrapped> => {
      const client = await pool.connect();
      const events = new EventEmitter();
      return {
        query: async <R>(config: PgQueryConfig): Promise<PgQueryResult<R>> => {
          if (config.text === "ROLLBACK") {
            if (emitError) events.emit("error", new Error("the client failed during the ROLLBACK"));
            await sleep(delayMs);
          }
          return client.query<R & pg.QueryResultRow>(config);
        },
        release: (err?: Error | boolean) => client.release(err),
        on: (event, listener) => events.on(event, listener),
        removeListener: (event, listener) => events.removeListener(event, listener),
      };
    },
  };
}

describe("transaction(): the callback's own error passes through, whatever happens to the ROLLBACK", () => {
  it("the ROLLBACK runs past the deadline", async () => {
    const seed = await h.store("late_rollback");
    // The deadline must not pass before the callback runs (its BEGIN and fence row come first, which a busy
    // machine can make take a few hundred milliseconds): 1 s, and the ROLLBACK held back well past it.
    const timeoutMs = 1_000;
    const store = new FencedPostgres(slowRollbackPool(h.pool, timeoutMs + 500), { schema: seed.schema, timeoutMs });
    const mine = new Error("mine");
    expect(await outcome(store.transaction(f("r", 1n), () => Promise.reject(mine)))).toBe(mine);
    // The caller's SQL on a table of its own that does not exist: its 42P01, not the store's StoreSetupError.
    const sqlError = await outcome(store.transaction(f("r", 1n), (c) => c.query({ text: "SELECT * FROM no_such_table_of_the_caller" })));
    expect(sqlError).toMatchObject({ code: "42P01" });
    expect(sqlError).not.toMatchObject({ name: "StoreSetupError" });
    expect(await h.counts(seed)).toEqual({ fence: 0, records: 0 });
  });

  it("the client emits 'error' during the ROLLBACK", async () => {
    const seed = await h.store("error_rollback");
    const store = new FencedPostgres(slowRollbackPool(h.pool, 0, true), { schema: seed.schema, timeoutMs: 1_000 });
    const mine = new Error("mine");
    expect(await outcome(store.transaction(f("r", 1n), () => Promise.reject(mine)))).toBe(mine);
    expect(await h.counts(seed)).toEqual({ fence: 0, records: 0 });
  });

  it("the deadline passed while the callback ran: StoreUnavailableError, with the callback's error as its cause", async () => {
    const seed = await h.store("slow_callback");
    const store = new FencedPostgres(h.pool, { schema: seed.schema, timeoutMs: 200 });
    const err = await outcome(store.transaction(f("r", 1n), (c) => c.query("SELECT pg_sleep(5)")));
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect(err).toMatchObject({ reason: "timeout", operation: "transaction" });
  });
});

describe("Session: a statement not sent because the deadline passed", () => {
  it("discards the connection: a client with an open transaction never goes back to the pool", async () => {
    const released: (Error | boolean | undefined)[] = [];
    const sent: string[] = [];
    const client: PgClient = {
      query: <R>(config: PgQueryConfig) => {
        sent.push(config.text);
        return Promise.resolve({ rows: [] as R[], command: config.text });
      },
      release: (err?: Error | boolean) => void released.push(err),
    };
    const pool = { query: (config: PgQueryConfig) => client.query(config), connect: () => Promise.resolve(client) } as PgPool;
    const s = await Session.open(pool, { operation: "transaction" }, 100);
    await s.query({ text: "BEGIN" }, "read");
    await sleep(150);
    const err = await outcome(s.query({ text: "COMMIT" }, "commit"));
    s.release();
    expect(err).toMatchObject({ name: "StoreUnavailableError", reason: "timeout" });
    expect(sent).toEqual(["BEGIN"]);
    expect(released).toHaveLength(1);
    expect(released[0]).toBeInstanceOf(Error);
  });
});
