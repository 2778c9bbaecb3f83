import { InvalidArgumentError } from "@fenced/fence";
import type { Lease } from "@fenced/lock";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError } from "../errors.js";
import { ENDINGS, leaseHarness, refusedWithItsError, type LeaseHarness } from "../lease-test-support.js";
import { FencedPostgres } from "./store.js";
import { outcome, pgHarness, type PgHarness } from "./test-support.js";

/**
 * Real leases of several resources (@fenced/lock's acquire([...])) handed to FencedPostgres whole:
 * transaction(), register() and putAll() take every fence of the lease; the calls that take one
 * fence refuse it; a lease that ended is refused before any I/O; a newer lease of the set fences an
 * older one out on every resource.
 */

let h: PgHarness;
let leases: LeaseHarness;
beforeAll(async () => {
  [h, leases] = await Promise.all([pgHarness(), leaseHarness()]);
});
afterAll(async () => {
  await Promise.all([h?.close(), leases?.stop()]);
});

/** The store through a pool that counts what it is asked for, beside the plain one for reading back. */
async function watchedStore(label: string): Promise<{ store: FencedPostgres; plain: FencedPostgres; sent: () => number }> {
  const plain = await h.store(label);
  let sent = 0;
  const pool = {
    query: (...args: Parameters<typeof h.pool.query>) => ((sent += 1), h.pool.query(...args)),
    connect: () => ((sent += 1), h.pool.connect()),
  };
  return { store: new FencedPostgres(pool as never, { schema: plain.schema }), plain, sent: () => sent };
}

async function withLease<T>(lease: Lease, work: (lease: Lease) => Promise<T>): Promise<T> {
  try {
    return await work(lease);
  } finally {
    await lease.release();
  }
}

describe("FencedPostgres: a lease of two accounts", () => {
  it("transaction() raises both ratchets to the lease's tokens and holder before the caller's SQL; putAll() writes under each", async () => {
    const store = await h.store("lease_set");
    await withLease(await leases.liveSet(["alice", "bob"]), async (lease) => {
      const [alice, bob] = lease.fences as [Lease["fences"][number], Lease["fences"][number]];
      expect(lease.fences).toHaveLength(2);
      await store.putAll(
        [
          { key: "accounts/alice", value: { balance: 100 }, resource: alice.resource },
          { key: "accounts/bob", value: { balance: 0 }, resource: bob.resource },
        ],
        { fences: lease },
      );
      // A transfer of 30 between the two accounts, in the caller's own SQL, under both fences.
      await store.transaction(lease, async (client) => {
        await client.query({
          text: `UPDATE "${store.schema}".records SET value = jsonb_build_object('balance', (value->>'balance')::int + (CASE key WHEN 'accounts/alice' THEN -30 ELSE 30 END))
WHERE key IN ('accounts/alice', 'accounts/bob')`,
        });
      });
      expect((await store.get("accounts/alice"))?.value).toEqual({ balance: 70 });
      expect((await store.get("accounts/bob"))?.value).toEqual({ balance: 30 });
      for (const fence of lease.fences)
        expect(await h.fenceRow(store, fence.resource)).toEqual({ token: fence.token, holder: lease.holder });
      expect(await store.get("accounts/bob")).toMatchObject({ resource: bob.resource, token: bob.token, holder: lease.holder });
      // One fence of the set is a fence: the single-fence calls take lease.fences[i].
      await store.put("accounts/alice", { balance: 71 }, { fence: alice });
      await store.register(lease);
    });
  });

  it("put(), delete() and transfer() refuse the lease itself (InvalidArgumentError) before any I/O: nothing is written", async () => {
    const { store, plain, sent } = await watchedStore("lease_set_one");
    await withLease(await leases.liveSet(["carol", "dave"]), async (lease) => {
      const other = { resource: "elsewhere", token: 1n };
      for (const call of [
        () => store.put("k", 1, { fence: lease }),
        () => store.put("k", 1, { fence: lease, ifVersion: "1" }),
        () => store.delete("k", { fence: lease }),
        () => store.transfer("k", { from: lease, to: other }),
        () => store.transfer("k", { from: other, to: lease }),
      ]) {
        const err = await outcome(call());
        expect(err).toBeInstanceOf(InvalidArgumentError);
        expect(String(err)).toContain("lease of 2 resources");
      }
      expect(sent()).toBe(0);
      expect(await h.counts(plain)).toEqual({ fence: 0, records: 0 });
    });
  });

  it("a newer lease of the set fences the older one out: a holder that does not know its lease ended is refused by the storage", async () => {
    const store = await h.store("lease_set_next");
    const first = await leases.liveSet(["erin", "frank"]);
    // What a paused holder still has: copies of its fences, which do not know the lease ended (the
    // fences themselves would: a store refuses them before any I/O once it has, lease-sets above).
    const stale = first.fences.map(({ resource, token, holder }) => ({ resource, token, holder }));
    await store.register(first);
    await first.release();
    await withLease(await leases.reacquire(first.resources), async (next) => {
      for (const [i, fence] of next.fences.entries()) expect(fence.token).toBeGreaterThan((stale[i] as { token: bigint }).token);
      await store.register(next);
      const before = await h.counts(store);
      const writes = [{ key: "k", value: "stale", resource: first.resource }];
      expect(await outcome(store.putAll(writes, { fences: stale }))).toBeInstanceOf(StaleTokenError);
      expect(await outcome(store.transaction(stale, () => Promise.resolve()))).toBeInstanceOf(StaleTokenError);
      expect(await outcome(store.register(stale))).toBeInstanceOf(StaleTokenError);
      expect(await h.counts(store)).toEqual(before);
      for (const fence of next.fences) expect(await h.fenceRow(store, fence.resource)).toEqual({ token: fence.token, holder: next.holder });
    });
  });
});

for (const ending of ENDINGS) {
  describe(`FencedPostgres: a lease of several resources that was ${ending}`, () => {
    it("transaction(), register() and putAll() are refused with its LeaseLostError before any I/O", async () => {
      const lease = await leases.endedSet(["gina", "hal"], ending);
      const { store, plain, sent } = await watchedStore("lease_set_lost");
      let ran = false;
      await refusedWithItsError(
        store.transaction(lease, () => {
          ran = true;
          return Promise.resolve();
        }),
        lease,
        ending,
      );
      await refusedWithItsError(store.register(lease), lease, ending);
      await refusedWithItsError(store.putAll([{ key: "k", value: 1, resource: lease.resource }], { fences: lease }), lease, ending);
      expect(ran).toBe(false);
      expect(sent()).toBe(0);
      expect(await h.counts(plain)).toEqual({ fence: 0, records: 0 });
    });

    it("so is every operation under one of its fences (lease.fences[i]), alone or in a list", async () => {
      const lease = await leases.endedSet(["ivy", "jon"], ending);
      const [first, second] = lease.fences as [Lease["fences"][number], Lease["fences"][number]];
      const { store, plain, sent } = await watchedStore("lease_set_fence_lost");
      await refusedWithItsError(store.put("k", { v: 1 }, { fence: second }), lease, ending);
      await refusedWithItsError(store.delete("k", { fence: second, ifVersion: "1" }), lease, ending);
      await refusedWithItsError(store.register(first), lease, ending);
      await refusedWithItsError(
        store.transaction([first, second], () => Promise.resolve()),
        lease,
        ending,
      );
      await refusedWithItsError(store.putAll([{ key: "k", value: 1, resource: second.resource }], { fences: [second] }), lease, ending);
      expect(sent()).toBe(0);
      expect(await h.counts(plain)).toEqual({ fence: 0, records: 0 });
    });
  });
}
