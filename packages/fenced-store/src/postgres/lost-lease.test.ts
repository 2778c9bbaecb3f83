import type { Lease } from "@fenced/lock";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENDINGS, leaseHarness, refusedWithItsError, type LeaseHarness } from "../lease-test-support.js";
import { FencedPostgres } from "./store.js";
import type { PgClient } from "./types.js";
import { pgHarness, type PgHarness } from "./test-support.js";

/**
 * A fence that knows its lease ended is refused before any I/O, whether or not a signal was passed:
 * a real @fenced/lock Lease, released or run out, handed to every operation that takes a fence,
 * with no `signal` option. The storage's own check is not what refuses here: nothing is sent.
 */

let h: PgHarness;
let leases: LeaseHarness;
beforeAll(async () => {
  [h, leases] = await Promise.all([pgHarness(), leaseHarness()]);
});
afterAll(async () => {
  await Promise.all([h?.close(), leases?.stop()]);
});

interface Watched {
  /** The store under test: every query and connection it asks its pool for is counted. */
  readonly store: FencedPostgres;
  /** The same schema through the plain pool: for setting up and reading back. */
  readonly plain: FencedPostgres;
  readonly sent: () => number;
}

async function watchedStore(label: string): Promise<Watched> {
  const plain = await h.store(label);
  let sent = 0;
  const pool = new Proxy(h.pool, {
    get(target, property) {
      const member = Reflect.get(target, property, target) as unknown;
      if ((property !== "query" && property !== "connect") || typeof member !== "function") return member;
      return (...args: unknown[]): unknown => {
        sent += 1;
        return (member as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store: new FencedPostgres(pool, { schema: plain.schema }), plain, sent: () => sent };
}

interface Losing {
  /** The store under test: its lease is released at the moment `at` names (losing). */
  readonly store: FencedPostgres;
  readonly plain: FencedPostgres;
  /** Statements the store handed its clients. */
  readonly statements: () => number;
  /** Waits for the release, and gives the pool's clients their own methods back. */
  readonly done: () => Promise<void>;
}

/**
 * When the store's client releases the lease: as the n-th statement's answer (or refusal) arrives,
 * before the store reads it; or as the store's session takes the client over from the pool (it stops
 * the pool's hand-over listener), before it sends anything.
 */
type ReleaseAt = { readonly answer: number } | "takeover";

/**
 * A store whose client releases `lease` at `at`: Lease.release() marks the lease lost at once, so
 * `lease.signal` aborts exactly there — e.g. between a write's first and second statements. The real
 * store, on the real server: only the release is timed by the test.
 */
async function losing(label: string, lease: Lease, at: ReleaseAt = { answer: 1 }): Promise<Losing> {
  const plain = await h.store(label);
  let statements = 0;
  let released: Promise<void> | undefined;
  const clients: object[] = [];
  const pool = new Proxy(h.pool, {
    get(target, property) {
      if (property !== "connect") return Reflect.get(target, property, target) as unknown;
      return async (): Promise<unknown> => {
        const client = await target.connect();
        const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
        const watched = async (...args: unknown[]): Promise<unknown> => {
          const n = (statements += 1);
          try {
            return await query(...args);
          } finally {
            if (at !== "takeover" && n === at.answer) released ??= lease.release();
          }
        };
        const removeListener = client.removeListener.bind(client) as (...args: unknown[]) => unknown;
        const takeover = (...args: unknown[]): unknown => ((released ??= lease.release()), removeListener(...args));
        Object.assign(client, at === "takeover" ? { query: watched, removeListener: takeover } : { query: watched });
        clients.push(client);
        return client;
      };
    },
  });
  return {
    store: new FencedPostgres(pool, { schema: plain.schema }),
    plain,
    statements: () => statements,
    done: async () => {
      for (const client of clients) for (const own of ["query", "removeListener"]) delete (client as Record<string, unknown>)[own];
      await released;
    },
  };
}

/** The lease's fence as a plain object: the store learns the lease ended only from `signal: lease.signal`. */
const fenceOf = (lease: Lease): { resource: string; token: bigint; holder: string } => ({
  resource: lease.resource,
  token: lease.token,
  holder: lease.holder,
});

describe("FencedPostgres: a lease lost between two statements of a write", () => {
  it("put, its first statement writing nothing (the row holds an older fence): the raise is not sent; LeaseLostError, applied no", async () => {
    const lease = await leases.live("pg-between");
    const { store, plain, statements, done } = await losing("lost_between", lease);
    try {
      const before = await plain.put("k", "old", { fence: { resource: lease.resource, token: 0n } });
      const fence = fenceOf(lease);
      // putOrderedShared finds the row at token 0 and writes nothing; putOrdered (the raise) would follow.
      await refusedWithItsError(store.put("k", "new", { fence, signal: lease.signal }), lease, "released");
      expect(statements()).toBe(1);
      expect(await plain.get("k")).toMatchObject({ value: "old", version: before.version });
      expect(await h.fenceRow(plain, lease.resource)).toEqual({ token: 0n, holder: null });
    } finally {
      await done();
    }
  });

  it("put and delete with ifVersion, the shared statement writing nothing: the exclusive one is not sent; LeaseLostError, applied no", async () => {
    for (const [label, write] of [
      ["put", (store, fence, ifVersion, signal) => store.put("k", "new", { fence, ifVersion, signal })],
      ["delete", (store, fence, ifVersion, signal) => store.delete("k", { fence, ifVersion, signal })],
    ] as const satisfies readonly (readonly [string, ConditionalWrite])[]) {
      const lease = await leases.live(`pg-between-${label}`);
      const { store, plain, statements, done } = await losing(`lost_between_${label}`, lease);
      try {
        const before = await plain.put("k", "old", { fence: { resource: lease.resource, token: 0n } });
        const fence = fenceOf(lease);
        // The shared statement finds the row at token 0 and writes nothing; the exclusive one (the raise) would follow.
        await refusedWithItsError(write(store, fence, before.version, lease.signal), lease, "released");
        expect([label, statements()]).toEqual([label, 1]);
        expect(await plain.get("k")).toMatchObject({ value: "old", version: before.version });
        expect(await h.fenceRow(plain, lease.resource)).toEqual({ token: 0n, holder: null });
      } finally {
        await done();
      }
    }
  });
});

describe("FencedPostgres: a lease lost where nothing of the call is or will be committed", () => {
  it("while the call waits for a pool client (a pool of one, its client held): nothing is sent; LeaseLostError, applied no", async () => {
    const lease = await leases.live("pg-pool-wait");
    const plain = await h.store("lost_pool_wait");
    const pool = new pg.Pool({ connectionString: h.url, max: 1 });
    const held = await pool.connect();
    let released: Promise<void> | undefined;
    try {
      const put = new FencedPostgres(pool, { schema: plain.schema }).put("k", "new", { fence: fenceOf(lease), signal: lease.signal });
      await expect.poll(() => pool.waitingCount, { message: "the put waits for a client", timeout: 5_000, interval: 5 }).toBe(1);
      released = lease.release();
      await refusedWithItsError(put, lease, "released");
      expect(await h.counts(plain)).toEqual({ fence: 0, records: 0 });
    } finally {
      held.release();
      await Promise.all([released, pool.end()]);
    }
  });

  it("as the session takes its client over, before the first statement: nothing is sent; LeaseLostError, applied no", async () => {
    const lease = await leases.live("pg-takeover");
    const { store, plain, statements, done } = await losing("lost_takeover", lease, "takeover");
    try {
      await refusedWithItsError(store.put("k", "new", { fence: fenceOf(lease), signal: lease.signal }), lease, "released");
      expect(statements()).toBe(0);
      expect(await h.counts(plain)).toEqual({ fence: 0, records: 0 });
    } finally {
      await done();
    }
  });

  it("between two statements of a transaction (transfer, after its ratchets): the owner is not moved, all rolled back; LeaseLostError, applied no", async () => {
    const lease = await leases.live("pg-run");
    // Released as ratchetPair answers (BEGIN is the first statement): transferOwner would follow.
    const { store, plain, statements, done } = await losing("lost_run", lease, { answer: 2 });
    try {
      await plain.put("k", "v", { fence: { resource: lease.resource, token: 0n } });
      const before = await h.recordRow(plain, "k");
      const to = { resource: `${lease.resource}-to`, token: 1n };
      await refusedWithItsError(store.transfer("k", { from: fenceOf(lease), to, signal: lease.signal }), lease, "released");
      expect(statements()).toBe(3); // BEGIN, ratchetPair, ROLLBACK
      expect(await h.recordRow(plain, "k")).toEqual(before);
      expect(await h.fenceRow(plain, lease.resource)).toEqual({ token: 0n, holder: null });
      expect(await h.fenceRow(plain, to.resource)).toBeUndefined();
    } finally {
      await done();
    }
  });

  it("between putAll's refused statement and its transaction: BEGIN is not sent; LeaseLostError, applied no", async () => {
    const lease = await leases.live("pg-begin");
    // Released as putAllOrdered's refusal arrives (a version the record is not at); the transaction naming it would follow.
    const { store, plain, statements, done } = await losing("lost_begin", lease, { answer: 1 });
    try {
      const before = await plain.put("k", "old", { fence: { resource: lease.resource, token: 0n } });
      const write = { key: "k", value: "new", ifVersion: (BigInt(before.version) + 1n).toString() };
      await refusedWithItsError(store.putAll([write], { fences: [fenceOf(lease)], signal: lease.signal }), lease, "released");
      expect(statements()).toBe(1);
      expect(await plain.get("k")).toMatchObject({ value: "old", version: before.version });
      expect(await h.fenceRow(plain, lease.resource)).toEqual({ token: 0n, holder: null });
    } finally {
      await done();
    }
  });

  it("before COMMIT (register of two fences; transaction() after the caller's SQL): rolled back; LeaseLostError, applied no", async () => {
    const set = await leases.liveSet(["pg-commit-a", "pg-commit-b"]);
    // Released as ratchetAll answers (after BEGIN): COMMIT would follow.
    const registering = await losing("lost_commit", set, { answer: 2 });
    try {
      await refusedWithItsError(registering.store.register(set, { signal: set.signal }), set, "released");
      expect(registering.statements()).toBe(3); // BEGIN, ratchetAll, ROLLBACK
      expect(await h.counts(registering.plain)).toEqual({ fence: 0, records: 0 });
    } finally {
      await registering.done();
    }
    const lease = await leases.live("pg-commit-tx");
    // Released as the caller's INSERT answers (after BEGIN and the ratchet): COMMIT would follow.
    const { store, plain, statements, done } = await losing("lost_commit_tx", lease, { answer: 3 });
    try {
      await h.pool.query(`CREATE TABLE "${plain.schema}".ledger (entry text)`);
      const insert = (client: PgClient): Promise<unknown> => client.query({ text: `INSERT INTO "${plain.schema}".ledger VALUES ('paid')` });
      await refusedWithItsError(store.transaction(fenceOf(lease), insert, { signal: lease.signal }), lease, "released");
      expect(statements()).toBe(4); // BEGIN, ratchet, INSERT, ROLLBACK
      expect((await h.pool.query(`SELECT * FROM "${plain.schema}".ledger`)).rows).toEqual([]);
      expect(await h.counts(plain)).toEqual({ fence: 0, records: 0 });
    } finally {
      await done();
    }
  });
});

type ConditionalWrite = (
  store: FencedPostgres,
  fence: { resource: string; token: bigint; holder: string },
  ifVersion: string,
  signal: AbortSignal,
) => Promise<unknown>;

for (const ending of ENDINGS) {
  describe(`FencedPostgres: a lease that was ${ending}, as fence (no signal) or as the signal of a plain fence`, () => {
    it("put and delete, plain and conditional, are refused with its LeaseLostError before any I/O; nothing is written", async () => {
      const lease = await leases.ended("pg-put", ending);
      const { store, plain, sent } = await watchedStore("lost_put");
      await refusedWithItsError(store.put("k", { v: 1 }, { fence: lease }), lease, ending);
      await refusedWithItsError(store.put("k", { v: 1 }, { fence: lease, ifVersion: "1" }), lease, ending);
      // A live signal passed beside it changes nothing: the fence itself says the lease ended.
      await refusedWithItsError(store.put("k", { v: 1 }, { fence: lease, signal: new AbortController().signal }), lease, ending);
      // A plain fence with the lease's signal: the signal says the lease ended.
      await refusedWithItsError(
        store.put("k", { v: 1 }, { fence: { resource: lease.resource, token: lease.token, holder: lease.holder }, signal: lease.signal }),
        lease,
        ending,
      );
      await refusedWithItsError(store.delete("k", { fence: lease }), lease, ending);
      await refusedWithItsError(store.delete("k", { fence: lease, ifVersion: "1" }), lease, ending);
      expect(sent()).toBe(0);
      expect(await plain.get("k")).toBeUndefined();
      expect(await h.counts(plain)).toEqual({ fence: 0, records: 0 });
      // The same error the lease's signal aborts with.
      expect(lease.signal.reason).toBe(lease.lostReason);
    });

    it("transaction runs none of its work; register raises no ratchet", async () => {
      const lease = await leases.ended("pg-tx", ending);
      const { store, plain, sent } = await watchedStore("lost_tx");
      let ran = false;
      const work = (): Promise<void> => {
        ran = true;
        return Promise.resolve();
      };
      await refusedWithItsError(store.transaction(lease, work), lease, ending);
      await refusedWithItsError(store.register(lease), lease, ending);
      expect(ran).toBe(false);
      expect(sent()).toBe(0);
      expect(await h.fenceRow(plain, lease.resource)).toBeUndefined();
      expect(await h.counts(plain)).toEqual({ fence: 0, records: 0 });
    });

    it("every write given a plain fence and the lease's signal is refused with its LeaseLostError, applied no, before any I/O", async () => {
      const lease = await leases.ended("pg-signal", ending);
      const { store, plain, sent } = await watchedStore("lost_signal");
      const fence = fenceOf(lease);
      const other = { resource: `${lease.resource}-other`, token: 1n };
      const signal = lease.signal;
      await refusedWithItsError(store.register(fence, { signal }), lease, ending);
      await refusedWithItsError(store.putAll([{ key: "k", value: 1 }], { fences: [fence], signal }), lease, ending);
      await refusedWithItsError(store.delete("k", { fence, signal }), lease, ending);
      await refusedWithItsError(store.delete("k", { fence, ifVersion: "1", signal }), lease, ending);
      await refusedWithItsError(store.transfer("k", { from: fence, to: other, signal }), lease, ending);
      await refusedWithItsError(
        store.transaction(fence, () => Promise.resolve(), { signal }),
        lease,
        ending,
      );
      expect(sent()).toBe(0);
      expect(await h.counts(plain)).toEqual({ fence: 0, records: 0 });
    });

    it("transfer is refused whichever of its two fences is the ended lease; the key stays where it was", async () => {
      const lost = await leases.ended("pg-transfer", ending);
      const live = await leases.live("pg-transfer-live");
      try {
        const { store, plain, sent } = await watchedStore("lost_transfer");
        // One key owned by the ended lease's resource (written below its token), one by the live lease's.
        await plain.put("of-lost", "a", { fence: { resource: lost.resource, token: 0n } });
        await plain.put("of-live", "b", { fence: live });
        const before = [await plain.get("of-lost"), await plain.get("of-live")];
        await refusedWithItsError(store.transfer("of-lost", { from: lost, to: live }), lost, ending);
        await refusedWithItsError(store.transfer("of-live", { from: live, to: lost }), lost, ending);
        expect(sent()).toBe(0);
        expect([await plain.get("of-lost"), await plain.get("of-live")]).toEqual(before);
        expect(await h.fenceRow(plain, lost.resource)).toEqual({ token: 0n, holder: null });
      } finally {
        await live.release();
      }
    });
  });
}

describe("FencedPostgres: a live lease as fence", () => {
  it("writes as before; the store reads its lostReason once and never its signal (which would arm a timer)", async () => {
    const lease = await leases.live("pg-live");
    try {
      const reads: PropertyKey[] = [];
      const fence = new Proxy(lease, {
        get(target, property) {
          reads.push(property);
          return Reflect.get(target, property, target) as unknown;
        },
      });
      const { store, plain } = await watchedStore("live");
      const { token } = await store.put("k", { v: 1 }, { fence });
      expect(token).toBe(lease.token);
      expect((await plain.get("k"))?.holder).toBe(lease.holder);
      expect(reads.filter((p) => p === "lostReason")).toEqual(["lostReason"]);
      expect(reads).not.toContain("signal");
    } finally {
      await lease.release();
    }
  });
});
