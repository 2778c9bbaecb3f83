import { randomBytes } from "node:crypto";
import pg from "pg";
import { startPostgres, type StartedPostgres } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SignalOptions } from "../contract.js";
import { FencedPostgres } from "./store.js";
import { fenceAt as f } from "./test-support.js";

// PROTOCOL.md, "Aborts": waiting for a pool connection ends at the caller's abort, with its reason,
// and nothing is sent — for every operation. The pool has one client, which the test holds; each
// call is aborted while it waits, and the held client goes back to the pool right after the abort,
// so a call that ignored its signal would get it and write. Each case checks that the call ended at
// the abort, before the client came back, and that the store's tables are exactly as they were.

const TIMEOUT_MS = 10_000; // far beyond the abort: a call that ends at its deadline is not ending at the abort

let server: StartedPostgres;
let pool: pg.Pool;
let admin: pg.Pool;
let store: FencedPostgres<pg.PoolClient>;

beforeAll(async () => {
  server = await startPostgres();
  pool = new pg.Pool({ connectionString: server.url, max: 1 });
  admin = new pg.Pool({ connectionString: server.url, max: 2 });
  store = new FencedPostgres(pool, { schema: `t_aborts_${randomBytes(4).toString("hex")}`, timeoutMs: TIMEOUT_MS });
  await store.migrate();
  // What every case starts from: a record at a known version under resource "r" (token 1), and a key of "from".
  await store.put("k", { v: 1 }, { fence: f("r", 1n, "h") });
  await store.put("moving", { v: 1 }, { fence: f("from", 1n, "h") });
});

afterAll(async () => {
  await pool?.end();
  await admin?.end();
  await server?.stop();
});

/** Every row of the store's tables, as text: "nothing was written" is this, equal before and after. */
async function tables(): Promise<string> {
  const q = (table: string, order: string): Promise<pg.QueryResult> =>
    admin.query(`SELECT to_jsonb(t)::text AS row FROM "${store.schema}".${table} t ORDER BY ${order}`);
  const [fence, records] = await Promise.all([q("fence", "resource"), q("records", "key")]);
  return JSON.stringify([fence.rows, records.rows]);
}

/**
 * Runs `call` with a signal while the pool's only client is held; once the call waits for a
 * connection, aborts, and gives the client back a turn later. Resolves what the call settled with
 * and whether the client had come back by then.
 */
async function abortedWhileWaiting(call: Operation): Promise<{ value: unknown; settledAfterRelease: boolean; reason: Error }> {
  const held = await pool.connect();
  const controller = new AbortController();
  const reason = new Error("the caller left");
  let released = false;
  const running = call(store, { signal: controller.signal }).then(
    (v) => ({ value: v, settledAfterRelease: released }),
    (e: unknown) => ({ value: e, settledAfterRelease: released }),
  );
  await expect.poll(() => pool.waitingCount, { message: "the call waits for a connection", timeout: 5_000, interval: 5 }).toBe(1);
  controller.abort(reason);
  // A macrotask later: everything the abort settles synchronously (and its microtasks) has run.
  setImmediate(() => {
    released = true;
    held.release();
  });
  const settled = await running;
  // Wait for the pool to be at rest: a call that went on waiting has had the client and given it back.
  await expect
    .poll(() => ({ waiting: pool.waitingCount, idle: pool.idleCount, total: pool.totalCount }), { timeout: 5_000, interval: 5 })
    .toEqual({ waiting: 0, idle: 1, total: 1 });
  return { ...settled, reason };
}

const fresh = (resource: string): ReturnType<typeof f> => f(resource, 5n, "h2");

type Operation = (store: FencedPostgres<pg.PoolClient>, o: Required<SignalOptions>) => Promise<unknown>;

const operations: [string, Operation][] = [
  ["register", (store, o) => store.register(fresh("r"), o)],
  ["register of a set", (store, o) => store.register([fresh("r"), fresh("other")], o)],
  ["put", (store, o) => store.put("k", { v: 2 }, { fence: fresh("r"), ...o })],
  ["put with ifVersion", async (store, o) => store.put("k", { v: 2 }, { fence: fresh("r"), ifVersion: await version("k"), ...o })],
  ["putAll", (store, o) => store.putAll([{ key: "k", value: { v: 2 } }], { fences: [fresh("r")], ...o })],
  ["delete", (store, o) => store.delete("k", { fence: fresh("r"), ...o })],
  ["delete with ifVersion", async (store, o) => store.delete("k", { fence: fresh("r"), ifVersion: await version("k"), ...o })],
  ["transfer", (store, o) => store.transfer("moving", { from: fresh("from"), to: fresh("to"), ...o })],
  ["transaction", (store, o) => store.transaction(fresh("r"), (client) => client.query("SELECT 1"), o)],
  ["fence", (store, o) => store.fence("r", o)],
  ["get", (store, o) => store.get("k", o)],
];

/** The record's version, read outside the store's pool (whose only client the test is about to hold). */
async function version(key: string): Promise<string> {
  const { rows } = await admin.query<{ version: string }>(`SELECT version::text FROM "${store.schema}".records WHERE key = $1`, [key]);
  return rows[0]?.version ?? "none";
}

describe("FencedPostgres: an abort while the pool has no idle client", () => {
  for (const [name, call] of operations) {
    it(`${name}: ends at the abort with its reason, before the connection comes back, and writes nothing`, async () => {
      const before = await tables();
      const { value, settledAfterRelease, reason } = await abortedWhileWaiting(call);
      expect(value).toBe(reason);
      expect(settledAfterRelease).toBe(false);
      expect(await tables()).toBe(before);
    });
  }

  it("an abort in any turn between the connection's arrival and the first statement sends nothing", async () => {
    // The client arrives, and the abort lands `hops` microtasks later: in Session.open, in the
    // resumption of Calls.session, or just before work() sends — every place a check could miss.
    // Once the abort lands after the first statement was handed to the client, the call is the
    // statement's ("a single-statement write already sent completes"): those hops are not judged here.
    const reason = new Error("the caller left");
    let judged = 0;
    for (let hops = 0; hops <= 12; hops++) {
      for (const [name, call] of operations.filter(([n]) => ["register", "put", "put with ifVersion", "transfer"].includes(n))) {
        const controller = new AbortController();
        let sent = false;
        let sentBeforeAbort: boolean | undefined;
        const abortLater = async (): Promise<void> => {
          for (let i = 0; i < hops; i++) await Promise.resolve();
          sentBeforeAbort = sent;
          controller.abort(reason);
        };
        let checkedOut: pg.PoolClient | undefined;
        const racing = new FencedPostgres(
          {
            query: (config: pg.QueryConfig) => pool.query(config),
            connect: async () => {
              const client = await pool.connect();
              // The test's own view of the wire: whether a statement has been handed to the client.
              const query = client.query.bind(client) as (...args: unknown[]) => unknown;
              Object.assign(client, { query: (...args: unknown[]) => ((sent = true), query(...args)) });
              checkedOut = client;
              void abortLater();
              return client;
            },
          } as typeof pool,
          { schema: store.schema, timeoutMs: TIMEOUT_MS },
        );
        const before = await tables();
        const value = await call(racing, { signal: controller.signal }).then(
          () => "written",
          (e: unknown) => e,
        );
        // The pool's client is the test's again: its own query method back.
        if (checkedOut !== undefined) delete (checkedOut as { query?: unknown }).query;
        if (sentBeforeAbort === true) continue; // written or refused, the statement decided

        judged++;
        expect([hops, name, value]).toEqual([hops, name, reason]);
        expect(await tables()).toBe(before);
      }
    }
    expect(judged).toBeGreaterThan(0);
  });
});
