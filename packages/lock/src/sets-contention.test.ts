import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LockNotAcquiredError } from "./errors.js";
import { Redlock } from "./redlock.js";
import { leaseKeysAt, leaseKeysOn, recordAcquires, type SentAcquire } from "./sets-test-support.js";
import { countersOn, loadScripts, startTestNodes, type TestNodes } from "./test-support.js";

const DURATION_MS = 6_000;
const TTL_MS = 1_000;
const A = "contended-set/a";
const B = "contended-set/b";

/** Who asks for what: two acquirers per order of the set, and one for each resource alone. */
const ACQUIRERS: readonly (readonly string[])[] = [[A, B], [A, B], [B, A], [B, A], [A], [B]];

interface Granted {
  acquirer: number;
  resources: readonly string[];
  tokens: readonly bigint[];
  /** performance.now() when acquire() resolved. */
  grantedAt: number;
  /** performance.now() when the holder decided to release (before the release was sent). */
  releasedAt: number;
  /** performance.now() at which the lease's own validity ended. */
  validEnd: number;
}

/**
 * PROTOCOL.md, "Sets", all or nothing and no deadlock: overlapping sets asked for in both orders, and
 * their resources alone, on 5 real nodes. Every attempt's value is known to the test (recordAcquires),
 * so that a node holding part of a set is recognised whatever the lock reported.
 */
describe("overlapping sets asked for in both orders on a healthy 5-node cluster", () => {
  let t: TestNodes;
  beforeAll(async () => {
    t = await startTestNodes(5);
    await Promise.all(t.admin.map(loadScripts));
  });
  afterAll(async () => {
    await t?.stop();
  });

  it(`[a, b], [b, a], a and b for ${DURATION_MS / 1000} s: never part of a set on a node, grants for both orders all along, no overlap, tokens increasing per resource`, async () => {
    /** Every attempt by its value, recorded before any node sees it. */
    const byValue = new Map<string, SentAcquire>();
    const sent: SentAcquire[][] = [];
    const locks: Redlock[] = [];
    for (const _ of ACQUIRERS) {
      const clients = await t.moreClients();
      sent.push(recordAcquires(clients, byValue).sent);
      locks.push(new Redlock(clients, { retryCount: 0, nodeTimeoutMs: 2_000 }));
    }
    const isSetValue = (value: string | null | undefined): boolean =>
      typeof value === "string" && (byValue.get(value)?.leaseKeys.length ?? 0) > 1;
    const partial: string[] = [];
    /** A node that holds a set's value under one of its keys must hold it under the other. */
    const checkNode = (node: number, [a, b]: (string | null)[], when: string): void => {
      if ((isSetValue(a) || isSetValue(b)) && a !== b) partial.push(`${when}: node ${node} holds a=${a}, b=${b}`);
    };

    const grants: Granted[] = [];
    const failuresAfterWhichSomethingWasLeft: string[] = [];
    const holders = new Map<string, number>([
      [A, 0],
      [B, 0],
    ]);
    let maxHolders = 0;
    let failed = 0;
    /** Every attempt's outcome, by the order of the set it asked for, in the order they ended. */
    const outcomes = new Map<string, boolean[]>();
    const ended = (resources: readonly string[], granted: boolean): void => {
      const list = outcomes.get(resources.join()) ?? [];
      list.push(granted);
      outcomes.set(resources.join(), list);
    };
    const end = performance.now() + DURATION_MS;

    const acquirer = async (id: number): Promise<void> => {
      const resources = ACQUIRERS[id]!;
      const redlock = locks[id]!;
      while (performance.now() < end) {
        let lease;
        try {
          lease = await redlock.acquire(resources.length === 1 ? resources[0]! : resources, TTL_MS);
        } catch (err) {
          if (!(err instanceof LockNotAcquiredError)) throw err;
          failed++;
          ended(resources, false);
          // The attempt released what it took on every node before rejecting: its value is nowhere.
          const value = sent[id]!.at(-1)!.value;
          const seen = await Promise.all(t.admin.map((redis) => leaseKeysAt(redis, [A, B])));
          seen.forEach((keys, node) => {
            checkNode(node, keys, `after a failed attempt of acquirer ${id}`);
            if (keys.includes(value)) failuresAfterWhichSomethingWasLeft.push(`acquirer ${id}: node ${node} holds ${keys.join(", ")}`);
          });
          await sleep(Math.random() * 4);
          continue;
        }
        const grantedAt = performance.now();
        ended(resources, true);
        const validEnd = grantedAt + lease.remainingMs;
        for (const r of resources) holders.set(r, holders.get(r)! + 1);
        maxHolders = Math.max(maxHolders, ...holders.values());
        await sleep(Math.random() * 3);
        for (const r of resources) holders.set(r, holders.get(r)! - 1);
        const releasedAt = performance.now();
        grants.push({ acquirer: id, resources, tokens: lease.fences.map((f) => f.token), grantedAt, releasedAt, validEnd });
        await lease.release();
      }
    };

    // Samples every node's two lease keys, each node read atomically, all the while.
    let samples = 0;
    let samplesHoldingASet = 0;
    const sampler = async (): Promise<void> => {
      while (performance.now() < end) {
        const seen = await leaseKeysOn(t.admin, [A, B]);
        samples++;
        if (seen.some(([a, b]) => a !== null && a === b)) samplesHoldingASet++;
        seen.forEach((keys, node) => checkNode(node, keys, `sample ${samples}`));
      }
    };

    await Promise.all([...ACQUIRERS.map((_, id) => acquirer(id)), sampler()]);

    grants.sort((x, y) => x.grantedAt - y.grantedAt);
    const ordered = (order: readonly string[]): Granted[] => grants.filter((g) => g.resources.join() === order.join());
    const windows = Math.floor(DURATION_MS / 1_000);
    const perSecond = (order: readonly string[]): number[] => {
      const counts = new Array<number>(windows).fill(0);
      const start = end - DURATION_MS;
      for (const g of ordered(order)) counts[Math.min(windows - 1, Math.floor((g.grantedAt - start) / 1_000))]!++;
      return counts;
    };
    const tokensOf = (r: string): bigint[] => grants.flatMap((g) => g.resources.flatMap((x, i) => (x === r ? [g.tokens[i]!] : [])));
    console.info(
      `sets under contention: ${grants.length} grants ([a,b] ${ordered([A, B]).length}, [b,a] ${ordered([B, A]).length}, ` +
        `a ${ordered([A]).length}, b ${ordered([B]).length}), ${failed} failed attempts; per second [a,b] ${perSecond([A, B]).join("/")}, ` +
        `[b,a] ${perSecond([B, A]).join("/")}; tokens a ${tokensOf(A)[0]}..${tokensOf(A).at(-1)}, b ${tokensOf(B)[0]}..${tokensOf(B).at(-1)}; ` +
        `${samples} samples of all nodes, ${samplesHoldingASet} saw a set held; longest runs of refusals ` +
        [[A, B], [B, A], [A], [B]].map((o) => longestRefused(outcomes.get(o.join()) ?? [])).join("/"),
    );

    // Never part of a set on a node, while running or after a failed attempt; a failed attempt left nothing.
    expect(partial.slice(0, 5)).toEqual([]);
    expect(failuresAfterWhichSomethingWasLeft.slice(0, 5)).toEqual([]);
    // The sampler saw sets held (it was not looking at an idle cluster), and contention was real.
    expect(samples).toBeGreaterThan(200);
    expect(samplesHoldingASet).toBeGreaterThan(20);
    expect(failed).toBeGreaterThan(50);
    // No deadlock: grants kept coming for both orders all along, and for each resource alone. Counted
    // in attempts, not seconds (a busy machine can leave an acquirer unscheduled for a second, which
    // says nothing about the lock). Attempts are not independent draws (six acquirers retry at once
    // while one holds, so refusals come in runs: 23 in a row at a grant rate of 0.63 was seen beside
    // CPU hogs), so no run length is "unlikely" enough to judge by. A deadlocked or livelocked order is
    // refused every attempt from some point on: no run of refusals may take a fifth of its attempts (a
    // deadlock that set in anywhere in the first four fifths of the run fails this).
    for (const order of [[A, B], [B, A], [A], [B]]) {
      const tries = outcomes.get(order.join()) ?? [];
      expect(tries.length, `attempts of ${order.join()}`).toBeGreaterThan(100);
      expect(tries.filter((granted) => granted).length, `grants of ${order.join()}`).toBeGreaterThan(0);
      const longest = longestRefused(tries);
      expect(longest, `${order.join()}: ${longest} refusals in a row of ${tries.length} attempts`).toBeLessThan(tries.length / 5);
    }

    // Hardly any lease ran out while held (the overlap check below would be vacuous for those; on a
    // loaded machine a holder's 0–3 ms may stretch past its validity).
    const expiredWhileHeld = grants.filter((g) => g.releasedAt > g.validEnd);
    expect(expiredWhileHeld.length).toBeLessThanOrEqual(grants.length / 100);
    if (expiredWhileHeld.length === 0) expect(maxHolders).toBe(1);
    for (const r of [A, B]) {
      const holding = grants.filter((g) => g.resources.includes(r));
      for (let i = 1; i < holding.length; i++) {
        const prev = holding[i - 1]!;
        const next = holding[i]!;
        // Leases holding r, in grant order: the next is granted only after the previous one ended, by their holders' clock.
        expect(
          next.grantedAt,
          `${r}: grant of ${next.resources.join()} (acquirer ${next.acquirer}) overlaps ${prev.resources.join()} (acquirer ${prev.acquirer})`,
        ).toBeGreaterThan(Math.min(prev.releasedAt, prev.validEnd));
      }
      // Tokens of r strictly increase in grant order (so they are unique), whichever lease held r.
      const tokens = tokensOf(r);
      for (let i = 1; i < tokens.length; i++)
        expect(tokens[i]! > tokens[i - 1]!, `${r}: token ${tokens[i]} after ${tokens[i - 1]}`).toBe(true);
      expect(new Set(tokens).size).toBe(tokens.length);
      // A majority of counters reached the last token.
      const counters = await countersOn(t.admin, r);
      expect(counters.filter((c) => c >= tokens.at(-1)!).length).toBeGreaterThanOrEqual(3);
    }
    expect(await leaseKeysOn(t.admin, [A, B])).toEqual(Array(5).fill([null, null]));
  });
});

/** The longest run of refused attempts in a list of outcomes (true: granted). */
function longestRefused(tries: readonly boolean[]): number {
  let longest = 0;
  let run = 0;
  for (const granted of tries) longest = Math.max(longest, (run = granted ? 0 : run + 1));
  return longest;
}
