import type { PoolClient } from "pg";
import { InvalidArgumentError } from "@fenced/fence";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError, VersionMismatchError } from "../errors.js";
import type { Fence } from "../fence.js";
import { FencedPostgres } from "./store.js";
import { gate, pgHarness, sleep, stillPending, type PgHarness } from "./test-support.js";

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

const fence = (resource: string, token: bigint): Fence => ({ resource, token });

describe("FencedPostgres: the article's figure", () => {
  it("token 33 reads and pauses, 34 writes, 33 resumes and writes: 33 is refused and 34's value stays", async () => {
    const store = await h.store("figure");
    await store.put("file", { body: "v0" }, { fence: fence("file", 32n) });
    const read = gate();
    const resume = gate();
    const client1 = (async () => {
      const seen = await store.get<{ body: string }>("file");
      read.open();
      await resume.opened; // stop-the-world GC pause: the lease expires meanwhile
      return store.put("file", { body: `${seen?.value.body}+client1` }, { fence: fence("file", 33n) });
    })();
    await read.opened;
    await store.put("file", { body: "client2" }, { fence: fence("file", 34n) });
    resume.open();

    const refused = await client1.then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(StaleTokenError);
    expect(refused).toMatchObject({ resource: "file", token: 33n, highest: 34n, code: "STALE_TOKEN" });
    expect(await store.get("file")).toMatchObject({ value: { body: "client2" }, token: 34n, resource: "file" });
    expect(await h.fenceToken(store, "file")).toBe(34n);
  });

  it("accepts an equal token (the same holder writing twice) and keeps tokens as 64-bit bigints", async () => {
    const store = await h.store("equal");
    const big = (1n << 63n) - 2n; // beyond Number.MAX_SAFE_INTEGER: a JS number would round it
    await store.put("k", 1, { fence: fence("r", big) });
    const again = await store.put("k", 2, { fence: fence("r", big) });
    expect(again.token).toBe(big);
    expect(await store.get("k")).toMatchObject({ value: 2, token: big, version: again.version });
    await expect(store.put("k", 3, { fence: fence("r", big - 1n) })).rejects.toMatchObject({ highest: big });
  });

  it("scopes the ratchet per resource, across every key that resource wrote", async () => {
    const store = await h.store("scope");
    await store.put("a", "A", { fence: fence("r1", 10n) });
    // Another resource's tokens are never compared with r1's.
    await store.put("b", "B", { fence: fence("r2", 3n) });
    // r1's ratchet covers keys r1 has not written yet.
    await expect(store.put("c", "C", { fence: fence("r1", 9n) })).rejects.toBeInstanceOf(StaleTokenError);
    expect(await store.get("c")).toBeUndefined();
    // A key belongs to the resource that created it: r2's ratchet says nothing about r1's holders, so r2 may not write "a".
    await expect(store.put("a", "A by r2", { fence: fence("r2", 3n) })).rejects.toMatchObject({
      name: "ResourceMismatchError",
      key: "a",
      resource: "r2",
      owner: "r1",
    });
    expect(await store.get("a")).toMatchObject({ value: "A", resource: "r1", token: 10n });
    await store.put("a", "A by r1", { fence: fence("r1", 10n) });
    expect(await store.get("a")).toMatchObject({ value: "A by r1", resource: "r1", token: 10n });
  });
});

describe("FencedPostgres: the both-paused hole (two stale holders write in increasing token order)", () => {
  async function scenario(label: string, guard: "none" | "ifVersion" | "register") {
    const store = await h.store(label);
    const r0 = await store.put("counter", { n: 0 }, { fence: fence("counter", 32n) });
    if (guard === "register") await store.register(fence("counter", 33n)); // 33 acquires
    // Both holders read version 0 and pause; 34 acquired after 33's lease expired.
    const read33 = await store.get<{ n: number }>("counter");
    if (guard === "register") await store.register(fence("counter", 34n)); // 34 acquires
    const read34 = await store.get<{ n: number }>("counter");
    expect(read33?.version).toBe(r0.version);
    expect(read34?.version).toBe(r0.version);
    const opts = (token: bigint, version: string | undefined) => ({
      fence: fence("counter", token),
      ...(guard === "ifVersion" && version !== undefined ? { ifVersion: version } : {}),
    });
    const acknowledged: number[] = [];
    for (const [token, read] of [
      [33n, read33],
      [34n, read34],
    ] as const) {
      try {
        await store.put("counter", { n: (read?.value.n ?? 0) + 1, by: Number(token) }, opts(token, read?.version));
        acknowledged.push(Number(token));
      } catch (err) {
        if (!(err instanceof StaleTokenError || err instanceof VersionMismatchError)) throw err;
        acknowledged.push(-Number(token));
      }
    }
    return { store, acknowledged, final: await store.get<{ n: number; by: number }>("counter"), r0 };
  }

  it("with the ratchet alone, the lost update happens: both increments are acknowledged, the counter moved by one", async () => {
    const { acknowledged, final } = await scenario("hole_none", "none");
    expect(acknowledged).toEqual([33, 34]);
    expect(final?.value).toEqual({ n: 1, by: 34 }); // 33's acknowledged increment is gone
  });

  it("with ifVersion, 34's stale read is refused with VersionMismatchError and nothing changes", async () => {
    const { store, acknowledged, final } = await scenario("hole_ifversion", "ifVersion");
    expect(acknowledged).toEqual([33, -34]);
    expect(final?.value).toEqual({ n: 1, by: 33 });
    // The refused conditional write rolled back its ratchet raise too.
    expect(await h.fenceToken(store, "counter")).toBe(33n);
    const read = await store.get("counter");
    const err = await store.put("counter", {}, { fence: fence("counter", 34n), ifVersion: "1" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(VersionMismatchError);
    expect(err).toMatchObject({ key: "counter", expected: "1", actual: read?.version, code: "VERSION_MISMATCH" });
  });

  it("with register on acquire, 33 is fenced before it writes, so no acknowledged write is lost", async () => {
    const { acknowledged, final } = await scenario("hole_register", "register");
    expect(acknowledged).toEqual([-33, 34]);
    expect(final?.value).toEqual({ n: 1, by: 34 });
  });
});

describe("FencedPostgres: 32 concurrent writers, increasing tokens, read-modify-write with ifVersion", () => {
  it("loses no acknowledged increment", async () => {
    const store = await h.store("rmw32");
    await store.put("counter", { n: 0 }, { fence: fence("c", 1n) });
    let acknowledged = 0;
    const fencedOut: StaleTokenError[] = [];
    await Promise.all(
      Array.from({ length: 32 }, async (_, i) => {
        const f = fence("c", BigInt(100 + i));
        await sleep(i); // later leases arrive later, while earlier holders are still writing
        for (let done = 0; done < 5;) {
          const cur = await store.get<{ n: number }>("counter");
          if (cur === undefined) throw new Error("counter vanished");
          try {
            await store.put("counter", { n: cur.value.n + 1 }, { fence: f, ifVersion: cur.version });
            acknowledged++;
            done++;
          } catch (err) {
            if (err instanceof VersionMismatchError) continue; // someone wrote since our read: re-read
            if (err instanceof StaleTokenError) {
              fencedOut.push(err); // a newer lease exists: this holder must stop
              return;
            }
            throw err;
          }
        }
      }),
    );
    const final = await store.get<{ n: number }>("counter");
    expect(final?.value.n).toBe(acknowledged);
    expect(acknowledged).toBeGreaterThanOrEqual(5); // the newest holder is never fenced
    expect(final?.token).toBe(131n);
    for (const err of fencedOut) expect(err.highest).toBeGreaterThan(err.token);
    expect(await h.fenceToken(store, "c")).toBe(131n);
  });
});

describe("FencedPostgres: transaction()", () => {
  it("runs the caller's SQL after the ratchet, in the same transaction, and returns its result", async () => {
    const store = await h.store("tx");
    await h.pool.query(`CREATE TABLE "${store.schema}".ledger (entry text)`);
    const result = await store.transaction(fence("ledger", 7n), async (client: PoolClient) => {
      // The fence row's current version was written by this very transaction: the ratchet ran first, here.
      const { rows } = await client.query<{ token: string; mine: boolean }>(
        `SELECT token, xmin = pg_current_xact_id()::xid AS mine FROM "${store.schema}".fence WHERE resource = $1`,
        ["ledger"],
      );
      await client.query(`INSERT INTO "${store.schema}".ledger VALUES ('paid')`);
      return rows[0];
    });
    expect(result).toEqual({ token: "7", mine: true });
    const { rows } = await h.pool.query(`SELECT entry FROM "${store.schema}".ledger`);
    expect(rows).toEqual([{ entry: "paid" }]);
  });

  it("a stale fence runs none of the caller's SQL", async () => {
    const store = await h.store("tx_stale");
    await store.register(fence("ledger", 50n));
    let ran = false;
    const err = await store
      .transaction(fence("ledger", 40n), async () => {
        ran = true;
        return Promise.resolve();
      })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ name: "StaleTokenError", token: 40n, highest: 50n });
    expect(ran).toBe(false);
  });

  it("holds the fence row until COMMIT: a stale writer waits, then is refused; a failing callback rolls back the ratchet", async () => {
    const store = await h.store("tx_lock");
    await h.pool.query(`CREATE TABLE "${store.schema}".ledger (entry text)`);
    await store.register(fence("ledger", 50n));
    const inside = gate();
    const finish = gate();
    const tx = store.transaction(fence("ledger", 60n), async (client) => {
      await client.query(`INSERT INTO "${store.schema}".ledger VALUES ('by 60')`);
      inside.open();
      await finish.opened;
    });
    await inside.opened;
    const stale = store.put("k", "by 55", { fence: fence("ledger", 55n) });
    const staleOutcome = stale.catch((e: unknown) => e);
    expect(await stillPending(stale, 150)).toBe(true); // blocked on the fence row, not refused on an old snapshot
    finish.open();
    await tx;
    expect(await staleOutcome).toMatchObject({ name: "StaleTokenError", token: 55n, highest: 60n });

    const boom = new Error("boom");
    await expect(
      store.transaction(fence("ledger", 70n), async (client) => {
        await client.query(`INSERT INTO "${store.schema}".ledger VALUES ('by 70')`);
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(await h.fenceToken(store, "ledger")).toBe(60n);
    // A statement that failed inside the callback, with the error swallowed, must not pass for a commit.
    await expect(
      store.transaction(fence("ledger", 80n), async (client) => {
        await client.query(`INSERT INTO "${store.schema}".ledger VALUES ('by 80')`);
        await client.query("SELECT 1/0").catch(() => undefined);
      }),
    ).rejects.toThrow(/rolled back/);
    expect(await h.fenceToken(store, "ledger")).toBe(60n);
    const { rows } = await h.pool.query(`SELECT entry FROM "${store.schema}".ledger ORDER BY entry`);
    expect(rows).toEqual([{ entry: "by 60" }]);
  });

  it("a writer that waited for the fence row acts on what the holder committed meanwhile", async () => {
    const store = await h.store("tx_wait");
    const v1 = await store.put("k", "v1", { fence: fence("r", 30n) });
    const inside = gate();
    const finish = gate();
    const holder = store.transaction(fence("r", 34n), async (client) => {
      await client.query(`UPDATE "${store.schema}".records SET value = '"by 34"', version = DEFAULT, token = 34 WHERE key = 'k'`);
      await client.query(`INSERT INTO "${store.schema}".records (key, value, token, resource) VALUES ('k2', '"by 34"', 34, 'r')`);
      inside.open();
      await finish.opened;
    });
    await inside.opened;
    // Both start (and take their snapshots) while 34 holds the fence row, then wait for it.
    const conditional = store.put("k", "by 35", { fence: fence("r", 35n), ifVersion: v1.version }).catch((e: unknown) => e);
    const deletion = store.delete("k2", { fence: fence("r", 35n) });
    await sleep(100);
    finish.open();
    await holder;
    expect(await conditional).toBeInstanceOf(VersionMismatchError); // not a write over 34's on a stale read
    // The row 34 inserted is seen and turned into the tombstone, not missed.
    const deleted = await deletion;
    expect(await store.get("k2")).toBeUndefined();
    expect(await h.recordRow(store, "k2")).toMatchObject({ value: undefined, token: 35n, resource: "r", version: deleted.version });
    expect(await store.get("k")).toMatchObject({ value: "by 34", token: 34n });
  });

  it("migrate() is idempotent and safe when several run at once", async () => {
    // Fresh schemas each round: concurrent CREATE … IF NOT EXISTS alone can collide in the catalogs.
    for (let round = 0; round < 5; round++) {
      const schema = `t_migrate_${round}_${process.pid}`;
      await h.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      const stores = Array.from({ length: 6 }, () => new FencedPostgres(h.pool, { schema }));
      await Promise.all(stores.map((s) => s.migrate()));
      await stores[0]?.put("k", round, { fence: fence("r", 1n) });
      await stores[1]?.migrate();
      expect(await stores[2]?.get("k")).toMatchObject({ value: round });
      await h.pool.query(`DROP SCHEMA "${schema}" CASCADE`);
    }
  });
});

describe("FencedPostgres: bad input", () => {
  const good = fence("r", 5n);
  const other = fence("other", 1n);
  const cycle: Record<string, unknown> = {};
  cycle.self = cycle;
  let deep: unknown = 1;
  for (let i = 0; i < 300; i++) deep = [deep];
  const badKeys: unknown[] = ["", "/a", "a//b", "a/", "a/../b", "./a", "x\u0000y", "x\ny", "\u0085", "é".repeat(257), 42, undefined];
  const badFences: unknown[] = [
    undefined,
    null,
    "r",
    { resource: "r" },
    { resource: "r", token: 1n, holder: "" },
    { resource: "r", token: 1n, holder: "a b" },
    { resource: "r", token: 1n, holder: null },
    { resource: "r", token: 5 },
    { resource: "r", token: "5" },
    { resource: "r", token: -1n },
    { resource: "r", token: 1n << 63n },
    { resource: "", token: 1n },
    { resource: "a\u0007", token: 1n },
    { resource: "x".repeat(513), token: 1n },
    { token: 1n },
  ];
  const holey: unknown[] = [];
  holey[1] = 1; // index 0 is a hole, which JSON would write as null
  class Money {
    cents = 1;
  }
  const badValues: unknown[] = [
    undefined,
    () => 1,
    1n,
    Symbol("s"),
    NaN,
    Infinity,
    -Infinity,
    cycle,
    { a: undefined },
    [1, undefined],
    holey,
    new Date(0),
    new Map(),
    new Money(),
    "\u0000",
    "\ud800",
    "a\udc00",
    { "\u0000": 1 },
    { [Symbol("k")]: 1 },
    { nested: { fn: Math.max } },
    deep,
  ];
  const badVersions: unknown[] = [5, 5n, null, "", "abc", "01", "-1", "1.0", "99999999999999999999"];
  const badOptions: unknown[] = [undefined, null, "r", 5];

  /** Each entry calls the store wrongly; all must throw InvalidArgumentError before any I/O. */
  function calls(store: FencedPostgres): [string, () => Promise<unknown>][] {
    const any = store as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
    return [
      ...badKeys.map((k): [string, () => Promise<unknown>] => [
        `put key ${JSON.stringify(k)}`,
        () => any.put!.call(store, k, 1, { fence: good }),
      ]),
      ...badKeys.map((k): [string, () => Promise<unknown>] => [`get key ${JSON.stringify(k)}`, () => any.get!.call(store, k)]),
      ...badKeys.map((k): [string, () => Promise<unknown>] => [
        `delete key ${JSON.stringify(k)}`,
        () => any.delete!.call(store, k, { fence: good }),
      ]),
      ...badFences.flatMap((f): [string, () => Promise<unknown>][] => [
        [`put fence ${String(f)}`, () => any.put!.call(store, "k", 1, { fence: f })],
        [`register ${String(f)}`, () => any.register!.call(store, f)],
        [`delete fence ${String(f)}`, () => any.delete!.call(store, "k", { fence: f })],
        [`transaction fence ${String(f)}`, () => any.transaction!.call(store, f, () => Promise.resolve())],
      ]),
      ...badValues.map((v, i): [string, () => Promise<unknown>] => [`value #${i}`, () => any.put!.call(store, "k", v, { fence: good })]),
      ...badVersions.flatMap((v): [string, () => Promise<unknown>][] => [
        [`put ifVersion ${String(v)}`, () => any.put!.call(store, "k", 1, { fence: good, ifVersion: v })],
        [`delete ifVersion ${String(v)}`, () => any.delete!.call(store, "k", { fence: good, ifVersion: v })],
      ]),
      ...badOptions.map((o): [string, () => Promise<unknown>] => [`put options ${String(o)}`, () => any.put!.call(store, "k", 1, o)]),
      ...badOptions.map((o): [string, () => Promise<unknown>] => [`delete options ${String(o)}`, () => any.delete!.call(store, "k", o)]),
      ...badOptions.map((o): [string, () => Promise<unknown>] => [
        `transfer options ${String(o)}`,
        () => any.transfer!.call(store, "k", o),
      ]),
      ...[null, "x", 5].map((o): [string, () => Promise<unknown>] => [
        `register options ${String(o)}`,
        () => any.register!.call(store, good, o),
      ]),
      ...[null, "x", 5].map((o): [string, () => Promise<unknown>] => [
        `transaction options ${String(o)}`,
        () => any.transaction!.call(store, good, () => Promise.resolve(), o),
      ]),
      ...badKeys.map((k): [string, () => Promise<unknown>] => [
        `transfer key ${JSON.stringify(k)}`,
        () => any.transfer!.call(store, k, { from: good, to: other }),
      ]),
      ...badFences.flatMap((bad): [string, () => Promise<unknown>][] => [
        [`transfer from ${String(bad)}`, () => any.transfer!.call(store, "k", { from: bad, to: other })],
        [`transfer to ${String(bad)}`, () => any.transfer!.call(store, "k", { from: good, to: bad })],
      ]),
      ...badVersions.map((v): [string, () => Promise<unknown>] => [
        `transfer ifVersion ${String(v)}`,
        () => any.transfer!.call(store, "k", { from: good, to: other, ifVersion: v }),
      ]),
      ["transfer within one resource", () => any.transfer!.call(store, "k", { from: good, to: fence("r", 6n) })],
      ["transaction without a callback", () => any.transaction!.call(store, good, "SELECT 1")],
    ];
  }

  it("throws InvalidArgumentError before any I/O", async () => {
    let io = 0;
    const trap = {
      query: () => ((io += 1), Promise.reject(new Error("I/O"))),
      connect: () => ((io += 1), Promise.reject(new Error("I/O"))),
    };
    const store = new FencedPostgres(trap, { schema: "unused" });
    for (const [what, call] of calls(store)) {
      const err = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, `${what}: ${String(err)}`).toBeInstanceOf(InvalidArgumentError);
      expect((err as InvalidArgumentError).argument, what).not.toBe("");
    }
    expect(io).toBe(0);
    for (const schema of ["Fenced", "pg_fenced", "a".repeat(64), "a-b", 'x"; DROP TABLE t; --', "", 1, null]) {
      expect(() => new FencedPostgres(trap, { schema } as never)).toThrow(InvalidArgumentError);
    }
    for (const options of [null, 5, "fenced"]) expect(() => new FencedPostgres(trap, options as never)).toThrow(InvalidArgumentError);
    expect(() => new FencedPostgres({} as never)).toThrow(InvalidArgumentError);
  });

  it("writes nothing to the real tables", async () => {
    const store = await h.store("bad_input");
    await store.put("k", { keep: true }, { fence: good });
    const before = { counts: await h.counts(store), record: await store.get("k"), token: await h.fenceToken(store, "r") };
    for (const [what, call] of calls(store)) {
      await expect(call(), what).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(await h.counts(store)).toEqual(before.counts);
    expect(await store.get("k")).toEqual(before.record);
    expect(await h.fenceToken(store, "r")).toBe(before.token);
  });

  it("stores every JSON shape it accepts exactly as given", async () => {
    const store = await h.store("json");
    const values = [
      null,
      true,
      0,
      -0.5,
      1e21,
      5e-324,
      "",
      "ü€😀",
      [],
      {},
      [1, [2, [3]]],
      { a: { b: [null, "x", { c: 1 }] } },
      Object.create(null) as object,
    ];
    for (const [i, value] of values.entries()) {
      await store.put(`v/${i}`, value, { fence: good });
      expect((await store.get(`v/${i}`))?.value).toEqual(value);
    }
  });
});
