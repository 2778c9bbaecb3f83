import { InvalidArgumentError } from "@fenced/fence";
import type { Lease } from "@fenced/lock";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError } from "../errors.js";
import { leaseHarness, type LeaseHarness } from "../lease-test-support.js";
import { outcome, pgHarness, type PgHarness } from "./test-support.js";

/**
 * A lease of several resources copied into a plain object — `{ ...lease }`, Object.assign, or
 * structuredClone (what postMessage does to a lease handed to a worker thread) — keeps its own fields
 * `resource`, `token` (the first resource's) and `resources` (all of them), and loses `fences`,
 * `holder` and `lostReason`, which live on the class. Taken as one fence, such a copy would have a
 * call check the first resource's ratchet only (without a holder, and without knowing the lease
 * ended): transaction() would run the caller's SQL over the other accounts unfenced. The stores
 * refuse a lease of several where one fence is expected; a copy of one must be refused the same way.
 */

let h: PgHarness;
let leases: LeaseHarness;
beforeAll(async () => {
  [h, leases] = await Promise.all([pgHarness(), leaseHarness()]);
});
afterAll(async () => {
  await Promise.all([h?.close(), leases?.stop()]);
});

const COPIES: readonly [string, (lease: Lease) => unknown][] = [
  ["{ ...lease }", (lease) => ({ ...lease })],
  ["Object.assign({}, lease)", (lease) => Object.assign({}, lease)],
  ["structuredClone(lease)", (lease) => structuredClone(lease)],
];

describe("FencedPostgres: a copy of a lease of several resources", () => {
  for (const [how, copy] of COPIES) {
    it(`${how}: refused where the lease itself is (InvalidArgumentError before any I/O), so a stale holder's SQL never runs`, async () => {
      const store = await h.store("copied_set");
      // The older lease of both accounts ends; a newer lease of bob alone registers its fence.
      const older = await leases.endedSet(["alice", "bob"], "released");
      const [alice, bob] = older.resources as [string, string];
      const { resource, token, holder } = older.fences[1] as Lease["fences"][number];
      await store.put("accounts/bob", { balance: 10 }, { fence: { resource, token, holder } }).catch(() => undefined);
      const newer = await leases.reacquire([bob]);
      try {
        await store.register(newer);
        await store.put("accounts/bob", { balance: 10 }, { fence: newer });
        // The lease itself, and its fences, know it ended: refused before any I/O. Copies of its fences
        // do not: the storage refuses them.
        expect(await outcome(store.transaction(older, () => Promise.resolve()))).toMatchObject({ name: "LeaseLostError" });
        expect(await outcome(store.transaction(older.fences, () => Promise.resolve()))).toMatchObject({ name: "LeaseLostError" });
        const copies = older.fences.map(({ resource, token, holder }) => ({ resource, token, holder }));
        expect(await outcome(store.transaction(copies, () => Promise.resolve()))).toBeInstanceOf(StaleTokenError);

        const copied = copy(older);
        let ran = false;
        const result = await outcome(
          store.transaction(copied as never, async (client) => {
            ran = true;
            await client.query({
              text: `UPDATE "${store.schema}".records SET value = '{"balance": 0}' WHERE key = 'accounts/bob'`,
            });
          }),
        );
        const written = await store.get("accounts/bob");
        const aliceRatchet = await h.fenceRow(store, alice);
        expect({ result, ran, bob: written?.value, aliceRatchet }).toEqual({
          result: expect.any(InvalidArgumentError) as unknown,
          ran: false,
          bob: { balance: 10 },
          aliceRatchet: undefined,
        });
        // Nor may it stand for one fence of a single-fence write, nor be registered as one.
        expect(await outcome(store.put("accounts/alice", 1, { fence: copied as never }))).toBeInstanceOf(InvalidArgumentError);
        expect(await outcome(store.register(copied as never))).toBeInstanceOf(InvalidArgumentError);
        expect(await h.counts(store)).toEqual({ fence: 1, records: 1 });
      } finally {
        await newer.release();
      }
    });
  }

  it("a copy of a lease of one resource is still its one fence (without a holder, as before)", async () => {
    const store = await h.store("copied_one");
    const lease = await leases.live("solo");
    try {
      await store.put("solo/k", 1, { fence: { ...lease } });
      expect(await h.fenceRow(store, lease.resource)).toEqual({ token: lease.token, holder: null });
    } finally {
      await lease.release();
    }
  });
});
