import { InvalidArgumentError, MAX_RESOURCES } from "@fenced/fence";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResourceMismatchError, StaleTokenError, VersionMismatchError } from "../errors.js";
import type { Fence } from "../fence.js";
import { ONE_STATEMENT_JSON_CHARS } from "./batch.js";
import { MAX_PUT_ALL } from "./options.js";
import { FencedPostgres } from "./store.js";
import { fenceAt, gate, outcome, pgHarness, sleep, type PgHarness } from "./test-support.js";

/**
 * Calls under several fences (transaction(), register(), putAll()) on a real PostgreSQL: every ratchet
 * is raised and checked before anything else, a refusal of any kind writes nothing, and each write is
 * a put under the fence of the resource it names. Fences here are plain objects; multi-resource
 * leases of @fenced/lock are in lease-sets.test.ts, the lock order in lock-order.test.ts.
 */

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

const f = (resource: string, token: bigint, holder = "h1"): Fence => fenceAt(resource, token, holder);

/** Every fence row and record of the store, as stored: "nothing changed" compares two of these. */
async function snapshot(store: FencedPostgres): Promise<unknown> {
  const { rows: fences } = await h.pool.query(`SELECT resource, token::text, holder FROM "${store.schema}".fence ORDER BY resource`);
  const { rows: records } = await h.pool.query(
    `SELECT key, value, version::text, token::text, resource, holder FROM "${store.schema}".records ORDER BY key`,
  );
  return { fences, records };
}

describe("FencedPostgres: transaction() and register() under several fences", () => {
  it("raises every ratchet before the callback runs, whatever order the fences come in, and commits them with its SQL", async () => {
    const store = await h.store("tx_multi");
    const seen = await store.transaction([f("b", 7n), f("a", 5n), f("c", 1n, "h2")], async (client) => {
      // Inside the transaction, before COMMIT: the callback sees its own raises.
      const { rows } = await client.query<{ resource: string; token: string; holder: string }>({
        text: `SELECT resource, token::text, holder FROM "${store.schema}".fence ORDER BY resource`,
      });
      return rows;
    });
    expect(seen).toEqual([
      { resource: "a", token: "5", holder: "h1" },
      { resource: "b", token: "7", holder: "h1" },
      { resource: "c", token: "1", holder: "h2" },
    ]);
    expect(await h.fenceRow(store, "a")).toEqual({ token: 5n, holder: "h1" });
    expect(await h.fenceRow(store, "c")).toEqual({ token: 1n, holder: "h2" });
    // An object carrying `fences` (a lease's shape) is the same set.
    await store.transaction({ fences: [f("a", 6n), f("b", 8n)] }, () => Promise.resolve());
    expect([await h.fenceToken(store, "a"), await h.fenceToken(store, "b")]).toEqual([6n, 8n]);
  });

  it("each stale fence of the set is refused with its own StaleTokenError: none of the callback runs, no ratchet moves", async () => {
    const store = await h.store("tx_stale");
    for (const r of ["a", "b", "c"]) await store.register(f(r, 10n));
    const before = await snapshot(store);
    const stale: Record<string, Fence> = {
      "a lower token": f("b", 9n),
      "the same token from another holder": f("b", 10n, "h2"),
    };
    for (const [why, bad] of Object.entries(stale)) {
      for (let at = 0; at < 4; at++) {
        // The stale fence at every position, beside fresh ones and a resource never seen (whose row must not be created).
        const fences = [f("a", 11n), f("c", 11n), f("new", 1n)];
        fences.splice(at, 0, bad);
        let ran = false;
        const err = await outcome(
          store.transaction(fences, () => {
            ran = true;
            return Promise.resolve();
          }),
        );
        expect(err, `${why} at ${at}`).toBeInstanceOf(StaleTokenError);
        expect(err).toMatchObject({ resource: "b", token: bad.token, highest: 10n, highestHolder: "h1" });
        expect(ran).toBe(false);
        expect(await outcome(store.register(fences))).toMatchObject({ name: "StaleTokenError", resource: "b", token: bad.token });
        expect(await snapshot(store), `${why} at ${at}`).toEqual(before);
      }
    }
    // Several stale: the error is the first one's in the order given.
    expect(await outcome(store.transaction([f("a", 11n), f("c", 3n), f("b", 2n)], () => Promise.resolve()))).toMatchObject({
      resource: "c",
      token: 3n,
    });
    expect(await outcome(store.register([f("b", 2n), f("c", 3n)]))).toMatchObject({ resource: "b", token: 2n });
    expect(await snapshot(store)).toEqual(before);
  });

  it("register() of several fences raises all of them, in one transaction; an equal token from the same holder passes again", async () => {
    const store = await h.store("register_multi");
    await store.register([f("x", 3n), f("y", 4n, "h2")]);
    expect(await h.fenceRow(store, "x")).toEqual({ token: 3n, holder: "h1" });
    expect(await h.fenceRow(store, "y")).toEqual({ token: 4n, holder: "h2" });
    await store.register({ fences: [f("y", 4n, "h2"), f("x", 3n)] });
    await expect(store.put("k", 1, { fence: f("x", 2n) })).rejects.toBeInstanceOf(StaleTokenError);
    // One fence in an array is that fence.
    await store.register([f("z", 1n)]);
    expect(await h.fenceToken(store, "z")).toBe(1n);
  });

  it("locks the set's fence rows one by one in resource order, whatever order they are given in", async () => {
    const store = await h.store("tx_lock_order");
    for (const r of ["a", "b", "c"]) await store.register(f(r, 0n));
    // "b"'s row is held by a transaction of the test's own, kept open: a row lock without the fence lock
    // (fence-lock.ts), which the set takes first for all three, so that it goes on to the rows.
    const holder = await h.pool.connect();
    await holder.query("BEGIN");
    await holder.query(`SELECT 1 FROM "${store.schema}".fence WHERE resource = 'b' FOR UPDATE`);
    const release = gate();
    const held = release.opened.then(async () => {
      await holder.query("COMMIT");
      holder.release();
    });
    // Given as c, a, b: locked as a, b, c, so it now holds "a" and waits for "b", and has not touched "c".
    const waiting = store.register([f("c", 1n), f("a", 1n), f("b", 1n)]);
    await waitForLockWaiters(1);
    const locked = async (resource: string): Promise<boolean> => {
      const err = await outcome(h.pool.query(`SELECT 1 FROM "${store.schema}".fence WHERE resource = $1 FOR UPDATE NOWAIT`, [resource]));
      if (err === undefined || !(err instanceof Error)) return false;
      expect(err).toMatchObject({ code: "55P03" }); // lock_not_available
      return true;
    };
    expect({ a: await locked("a"), c: await locked("c") }).toEqual({ a: true, c: false });
    release.open();
    await held;
    await waiting;
    expect([await h.fenceToken(store, "a"), await h.fenceToken(store, "b"), await h.fenceToken(store, "c")]).toEqual([1n, 1n, 1n]);
  });
});

/** Resolves once `n` backends wait for a row lock (a statement blocked behind another transaction). */
async function waitForLockWaiters(n: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const { rows } = await h.pool.query<{ n: string }>(
      "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
    );
    if (Number(rows[0]?.n) >= n) return;
    await sleep(10);
  }
  throw new Error(`no ${n} backends waiting for a lock after 5 s`);
}

describe("FencedPostgres: putAll()", () => {
  it("writes each record under the fence of the resource it names, raises every fence, answers in the order given", async () => {
    const store = await h.store("put_all");
    const fences = [f("orders", 4n), f("stock", 9n, "h2"), f("audit", 2n)];
    const results = await store.putAll(
      [
        { key: "stock/apple", value: { n: 3 }, resource: "stock" },
        { key: "orders/1", value: { total: 12 }, resource: "orders" },
        { key: "orders/0", value: [1, "two"], resource: "orders" },
      ],
      { fences },
    );
    expect(results.map((r) => r.token)).toEqual([9n, 4n, 4n]);
    expect(new Set(results.map((r) => r.version)).size).toBe(3);
    expect(await store.get("stock/apple")).toEqual({
      value: { n: 3 },
      version: results[0]?.version,
      token: 9n,
      resource: "stock",
      holder: "h2",
    });
    expect(await store.get("orders/1")).toMatchObject({
      value: { total: 12 },
      version: results[1]?.version,
      resource: "orders",
      holder: "h1",
    });
    expect(await store.get("orders/0")).toMatchObject({ value: [1, "two"], version: results[2]?.version });
    // A fence no write names is raised all the same.
    expect(await h.fenceRow(store, "audit")).toEqual({ token: 2n, holder: "h1" });
    // Existing keys of the same owners, one with ifVersion: a write of each kind.
    const again = await store.putAll(
      [
        { key: "orders/1", value: 13, resource: "orders", ifVersion: results[1]?.version },
        { key: "stock/apple", value: 2, resource: "stock" },
      ],
      { fences },
    );
    expect(await store.get("orders/1")).toMatchObject({ value: 13, version: again[0]?.version });
    expect(await store.get("stock/apple")).toMatchObject({ value: 2, version: again[1]?.version });
    expect(BigInt(again[0]?.version ?? "0")).toBeGreaterThan(BigInt(results[2]?.version ?? "0"));
  });

  it("one statement when nothing is refused; refused in any way, nothing written and the transaction that follows names it", async () => {
    const base = await h.store("put_all_one_statement");
    // The same schema through a pool that records the statements sent: one for the whole call.
    const sent: string[] = [];
    const pool = {
      query: (config: never) => h.pool.query(config),
      connect: async () => {
        const client = await h.pool.connect();
        return {
          query: (config: { text: string }) => (sent.push(config.text.split(/\s/)[0] ?? ""), client.query(config as never)),
          release: (err?: Error | boolean) => client.release(err),
        };
      },
    };
    const store = new FencedPostgres(pool as never, { schema: base.schema });
    const fences = [f("a", 1n), f("b", 1n)];
    const [a] = await store.putAll(
      [
        { key: "a/1", value: 1, resource: "a" },
        { key: "b/1", value: 1, resource: "b" },
      ],
      { fences },
    );
    expect(sent).toEqual(["WITH"]);
    // Each refusal of the one statement: a stale fence, a key of another resource, a version that does not hold.
    await base.register(f("b", 2n));
    const refused: [string, Parameters<FencedPostgres["putAll"]>, (err: unknown) => void][] = [
      ["stale", [[{ key: "a/1", value: 2, resource: "a" }], { fences }], (err) => expect(err).toBeInstanceOf(StaleTokenError)],
      [
        "foreign",
        [[{ key: "b/1", value: 2, resource: "a" }], { fences: [f("a", 1n)] }],
        (err) => expect(err).toMatchObject({ name: "ResourceMismatchError", key: "b/1", owner: "b" }),
      ],
      [
        "version",
        [[{ key: "a/1", value: 2, ifVersion: String(BigInt(a!.version) + 100n) }], { fences: [f("a", 1n)] }],
        (err) => expect(err).toMatchObject({ name: "VersionMismatchError", key: "a/1", actual: a!.version }),
      ],
    ];
    for (const [what, args, check] of refused) {
      const before = await snapshot(base);
      sent.length = 0;
      check(await outcome(store.putAll(...args)));
      expect(sent[0], what).toBe("WITH");
      expect(sent[1], what).toBe("BEGIN;");
      expect(await snapshot(base), what).toEqual(before);
    }
    // Out of order: a store that has heard of no version (after 0), the key written at its fence since.
    // Refused as a whole, then written by the transaction, whose COMMIT follows every answer.
    const fresh = new FencedPostgres(pool as never, { schema: base.schema });
    sent.length = 0;
    const [late] = await fresh.putAll([{ key: "a/1", value: "fallback" }], { fences: [f("a", 1n)] });
    expect(sent.slice(0, 2)).toEqual(["WITH", "BEGIN;"]);
    expect(await base.get("a/1")).toMatchObject({ value: "fallback", version: late?.version });
    // Values too large for one parameter go straight to the transaction (ONE_STATEMENT_JSON_CHARS).
    sent.length = 0;
    const big = "x".repeat(ONE_STATEMENT_JSON_CHARS / 2);
    await store.putAll(
      [
        { key: "a/big1", value: big },
        { key: "a/big2", value: big },
      ],
      { fences: [f("a", 1n)] },
    );
    expect(sent[0]).toBe("BEGIN;");
    expect(await base.get("a/big2")).toMatchObject({ value: big });
  });

  it("on a schema this version's migrate() has not run on (no refuse_stale_fence): StoreSetupError not-migrated, nothing written", async () => {
    const store = await h.store("put_all_old_schema");
    await h.pool.query(`DROP FUNCTION "${store.schema}".refuse_stale_fence()`);
    const err = await outcome(store.putAll([{ key: "k", value: 1 }], { fences: [f("r", 1n)] }));
    expect(err).toMatchObject({ name: "StoreSetupError", problem: "not-migrated" });
    expect(await h.counts(store)).toEqual({ fence: 0, records: 0 });
    await store.migrate();
    await store.putAll([{ key: "k", value: 1 }], { fences: [f("r", 1n)] });
    expect(await store.get("k")).toMatchObject({ value: 1 });
  });

  it("with one fence a write may leave its resource out; with several it must name one of them", async () => {
    const store = await h.store("put_all_one");
    const [only] = await store.putAll([{ key: "k", value: 1 }], { fences: [f("r", 1n)] });
    expect(await store.get("k")).toMatchObject({ value: 1, resource: "r", version: only?.version });
    await store.putAll([{ key: "k", value: 2 }], { fences: { fences: [f("r", 1n)] } });
    expect(await store.get("k")).toMatchObject({ value: 2 });
    const err = await outcome(store.putAll([{ key: "k", value: 3 }], { fences: [f("r", 1n), f("s", 1n)] }));
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err).toMatchObject({ argument: "writes[0].resource" });
    expect(await store.get("k")).toMatchObject({ value: 2 });
  });

  it("a stale fence, any one of the set, is StaleTokenError and nothing is written, the records' fences' ratchets included", async () => {
    const store = await h.store("put_all_stale");
    await store.putAll(
      [
        { key: "a/1", value: "a", resource: "a" },
        { key: "b/1", value: "b", resource: "b" },
      ],
      { fences: [f("a", 5n), f("b", 5n)] },
    );
    const before = await snapshot(store);
    for (const stale of ["a", "b"]) {
      const fences = [f("a", stale === "a" ? 4n : 6n), f("b", stale === "b" ? 4n : 6n), f("fresh", 1n)];
      const err = await outcome(
        store.putAll(
          [
            { key: "a/1", value: "new", resource: "a" },
            { key: "b/2", value: "new", resource: "b" },
            { key: "fresh/1", value: "new", resource: "fresh" },
          ],
          { fences },
        ),
      );
      expect(err).toBeInstanceOf(StaleTokenError);
      expect(err).toMatchObject({ resource: stale, token: 4n, highest: 5n });
      expect(await snapshot(store)).toEqual(before);
    }
  });

  it("a key of another resource is ResourceMismatchError, a version that does not hold VersionMismatchError: nothing written", async () => {
    const store = await h.store("put_all_refused");
    const theirs = await store.put("m/theirs", "kept", { fence: f("other", 1n) });
    const ours = await store.put("m/ours", "v1", { fence: f("mine", 1n) });
    await store.delete("m/gone", { fence: f("mine", 1n) });
    const before = await snapshot(store);
    const fences = [f("mine", 2n), f("second", 1n)];
    const mine = (key: string, ifVersion?: string) => ({ key, value: "new", resource: "mine", ifVersion });
    const cases: [string, Parameters<FencedPostgres["putAll"]>[0], (err: unknown) => void][] = [
      [
        "a key owned by another resource",
        [mine("m/a-new"), mine("m/theirs"), { key: "m/z-new", value: 1, resource: "second" }],
        (err) => {
          expect(err).toBeInstanceOf(ResourceMismatchError);
          expect(err).toMatchObject({ key: "m/theirs", resource: "mine", owner: "other" });
        },
      ],
      [
        "a conditional write to a key owned by another resource",
        [mine("m/theirs", theirs.version)],
        (err) => expect(err).toMatchObject({ name: "ResourceMismatchError", key: "m/theirs", owner: "other" }),
      ],
      [
        "an old version",
        [mine("m/a-new"), mine("m/ours", String(BigInt(ours.version) + 1000n))],
        (err) => {
          expect(err).toBeInstanceOf(VersionMismatchError);
          expect(err).toMatchObject({ key: "m/ours", actual: ours.version });
        },
      ],
      ["ifVersion on a key never written", [mine("m/none", "1")], (err) => expect(err).toMatchObject({ key: "m/none", actual: undefined })],
      [
        "ifVersion on a tombstone",
        [mine("m/gone", ours.version)],
        (err) => expect(err).toMatchObject({ name: "VersionMismatchError", key: "m/gone" }),
      ],
      [
        // Key order: "m/0" is refused before "m/ours" is reached, whatever the order given.
        "the first refusal in key order",
        [mine("m/ours", ours.version), { key: "m/0", value: 1, resource: "second", ifVersion: "1" }],
        (err) => expect(err).toMatchObject({ name: "VersionMismatchError", key: "m/0" }),
      ],
    ];
    for (const [what, writes, check] of cases) {
      const err = await outcome(store.putAll(writes, { fences }));
      check(err);
      expect(await snapshot(store), what).toEqual(before);
    }
    // The owner writes its tombstoned key again; the matching version lands.
    const [gone, same] = await store.putAll([mine("m/gone"), mine("m/ours", ours.version)], { fences });
    expect(await store.get("m/gone")).toMatchObject({ value: "new", version: gone?.version, resource: "mine" });
    expect(await store.get("m/ours")).toMatchObject({ value: "new", version: same?.version, token: 2n });
    expect(await store.get("m/theirs")).toMatchObject({ value: "kept", resource: "other" });
  });

  it("bad arguments are InvalidArgumentError before any I/O, and put() refuses a lease of several resources", async () => {
    let io = 0;
    const trap = {
      query: () => ((io += 1), Promise.reject(new Error("I/O"))),
      connect: () => ((io += 1), Promise.reject(new Error("I/O"))),
    };
    const store = new FencedPostgres(trap, { schema: "unused" });
    const any = store as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
    const two = [f("a", 1n), f("b", 1n)];
    const w = (extra: Record<string, unknown> = {}) => ({ key: "k", value: 1, resource: "a", ...extra });
    // What a @fenced/lock Lease of two resources looks like to a store: its own resource and token are its first fence's.
    const pair = { resource: "a", token: 1n, holder: "h1", fences: two };
    const tooMany = Array.from({ length: MAX_RESOURCES + 1 }, (_, i) => f(`r${i}`, 1n));
    const badSets: [string, unknown][] = [
      ["no fences", []],
      ["a lease without fences", { fences: [] }],
      ["fences that are not an array", { fences: "a" }],
      ["two fences of one resource", [f("a", 1n), f("a", 2n)]],
      ["a bad fence among good ones", [f("a", 1n), { resource: "b", token: 1 }]],
      ["more than MAX_RESOURCES", tooMany],
    ];
    const calls: [string, () => Promise<unknown>][] = [
      ...badSets.flatMap(([what, set]): [string, () => Promise<unknown>][] => [
        [`transaction: ${what}`, () => any.transaction!.call(store, set, () => Promise.resolve())],
        [`register: ${what}`, () => any.register!.call(store, set)],
        [`putAll: ${what}`, () => any.putAll!.call(store, [w()], { fences: set })],
      ]),
      ["putAll without options", () => any.putAll!.call(store, [w()])],
      ["putAll without fences", () => any.putAll!.call(store, [w()], {})],
      ["putAll with a single fence as fences", () => any.putAll!.call(store, [w()], { fences: f("a", 1n) })],
      ["putAll with a bad signal", () => any.putAll!.call(store, [w()], { fences: two, signal: {} })],
      ["putAll writes not an array", () => any.putAll!.call(store, w(), { fences: two })],
      ["putAll no writes", () => any.putAll!.call(store, [], { fences: two })],
      [
        "putAll too many writes",
        () =>
          any.putAll!.call(
            store,
            Array.from({ length: MAX_PUT_ALL + 1 }, (_, i) => w({ key: `k${i}` })),
            { fences: two },
          ),
      ],
      ["putAll a write that is not an object", () => any.putAll!.call(store, ["k"], { fences: two })],
      ["putAll a bad key", () => any.putAll!.call(store, [w({ key: "a//b" })], { fences: two })],
      ["putAll one key twice", () => any.putAll!.call(store, [w(), w({ resource: "b" })], { fences: two })],
      ["putAll a bad value", () => any.putAll!.call(store, [w({ value: undefined })], { fences: two })],
      ["putAll a bad resource", () => any.putAll!.call(store, [w({ resource: 5 })], { fences: two })],
      ["putAll a resource not among the fences", () => any.putAll!.call(store, [w({ resource: "c" })], { fences: two })],
      ["putAll no resource, two fences", () => any.putAll!.call(store, [{ key: "k", value: 1 }], { fences: two })],
      ["putAll a bad ifVersion", () => any.putAll!.call(store, [w({ ifVersion: 3 })], { fences: two })],
      ["put with a lease of two resources", () => any.put!.call(store, "k", 1, { fence: pair })],
      ["put ifVersion with a lease of two resources", () => any.put!.call(store, "k", 1, { fence: pair, ifVersion: "1" })],
      ["delete with a lease of two resources", () => any.delete!.call(store, "k", { fence: pair })],
      ["transfer from a lease of two resources", () => any.transfer!.call(store, "k", { from: pair, to: f("c", 1n) })],
      ["transfer to a lease of two resources", () => any.transfer!.call(store, "k", { from: f("c", 1n), to: pair })],
    ];
    for (const [what, call] of calls) {
      const err = await outcome(call());
      expect(err, `${what}: ${String(err)}`).toBeInstanceOf(InvalidArgumentError);
    }
    expect(io).toBe(0);
    // The lease of two resources is refused as one fence, and taken whole where several are: transaction, register, putAll.
    expect(await outcome(any.put!.call(store, "k", 1, { fence: pair }))).toMatchObject({ argument: "options.fence" });
    expect(await outcome(any.putAll!.call(store, [w({ resource: "c" })], { fences: pair }))).toMatchObject({
      argument: "writes[0].resource",
    });
  });

  it("bad arguments write nothing to the real tables", async () => {
    const store = await h.store("put_all_bad");
    await store.putAll([{ key: "k", value: 1, resource: "a" }], { fences: [f("a", 1n), f("b", 1n)] });
    const before = await snapshot(store);
    const pair = { resource: "a", token: 9n, holder: "h1", fences: [f("a", 9n), f("b", 9n)] };
    for (const call of [
      () => store.put("k", 2, { fence: pair }),
      () => store.putAll([{ key: "k", value: 2, resource: "c" }], { fences: [f("a", 9n), f("b", 9n)] }),
      () =>
        store.putAll(
          [
            { key: "k", value: 2, resource: "a" },
            { key: "k", value: 3, resource: "b" },
          ],
          { fences: [f("a", 9n), f("b", 9n)] },
        ),
      () => store.transaction([f("a", 9n), f("a", 10n)], () => Promise.resolve()),
    ])
      await expect(call()).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await snapshot(store)).toEqual(before);
  });
});
