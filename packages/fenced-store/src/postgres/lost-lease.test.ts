import type { Lease } from "@fenced/lock";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENDINGS, leaseHarness, refusedWithItsError, type LeaseHarness } from "../lease-test-support.js";
import { FencedPostgres } from "./store.js";
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
  /** The store under test: its lease is released the moment its client answers the first statement. */
  readonly store: FencedPostgres;
  readonly plain: FencedPostgres;
  /** Statements the store handed its clients. */
  readonly statements: () => number;
  /** Waits for the release, and gives the pool's clients their own query method back. */
  readonly done: () => Promise<void>;
}

/**
 * A store whose client releases `lease` when the first statement's answer arrives, before the store
 * reads it: Lease.release() marks the lease lost at once, so `lease.signal` aborts exactly between
 * a write's first and second statements. The real store, on the real server: only the release is
 * timed by the test.
 */
async function losingAfterFirstStatement(label: string, lease: Lease): Promise<Losing> {
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
          statements += 1;
          const answer = await query(...args);
          released ??= lease.release();
          return answer;
        };
        Object.assign(client, { query: watched });
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
      for (const client of clients) delete (client as { query?: unknown }).query;
      await released;
    },
  };
}

describe("FencedPostgres: a lease lost between two statements of a write", () => {
  it("put, its first statement writing nothing (the row holds an older fence): the raise is not sent; LeaseLostError, applied no", async () => {
    const lease = await leases.live("pg-between");
    const { store, plain, statements, done } = await losingAfterFirstStatement("lost_between", lease);
    try {
      const before = await plain.put("k", "old", { fence: { resource: lease.resource, token: 0n } });
      const fence = { resource: lease.resource, token: lease.token, holder: lease.holder };
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
      const { store, plain, statements, done } = await losingAfterFirstStatement(`lost_between_${label}`, lease);
      try {
        const before = await plain.put("k", "old", { fence: { resource: lease.resource, token: 0n } });
        const fence = { resource: lease.resource, token: lease.token, holder: lease.holder };
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
      const fence = { resource: lease.resource, token: lease.token, holder: lease.holder };
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
