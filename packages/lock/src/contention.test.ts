import { setMaxListeners } from "node:events";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Redlock } from "./redlock.js";
import { countersOn, leaseValuesOn, maxOf, startTestNodes, type TestNodes } from "./test-support.js";

const ACQUIRERS = 20;
const DURATION_MS = 10_000;
const TTL_MS = 2_000;

interface Grant {
  acquirer: number;
  token: bigint;
  /** performance.now() when acquire() resolved. */
  grantedAt: number;
  /** performance.now() when the holder decided to release (before the release was sent). */
  releasedAt: number;
  /** performance.now() at which the lease's own validity ended. */
  validEnd: number;
}

describe("contention on a healthy 5-node cluster", () => {
  let t: TestNodes;
  beforeAll(async () => {
    t = await startTestNodes(5);
  });
  afterAll(async () => {
    await t?.stop();
  });

  it(`${ACQUIRERS} concurrent acquirers for ${DURATION_MS / 1000} s: leases never overlap, tokens are distinct and increase in grant order`, async () => {
    const resource = "contended";
    // Every acquirer is a separate lock user with its own connections.
    const locks = await Promise.all(
      Array.from(
        { length: ACQUIRERS },
        async () => new Redlock(await t.moreClients(), { retryCount: Number.POSITIVE_INFINITY, retryDelayMs: 5, retryJitterMs: 20 }),
      ),
    );
    const grants: Grant[] = [];
    let holders = 0;
    let maxHolders = 0;
    const stop = new AbortController();
    setMaxListeners(ACQUIRERS * 2, stop.signal); // every waiting acquirer listens to it
    const end = performance.now() + DURATION_MS;
    setTimeout(() => stop.abort(), DURATION_MS).unref();

    const acquirer = async (id: number, redlock: Redlock): Promise<void> => {
      while (performance.now() < end) {
        let lease;
        try {
          lease = await redlock.acquire(resource, TTL_MS, { signal: stop.signal });
        } catch (err) {
          if (stop.signal.aborted) return;
          throw err;
        }
        const grantedAt = performance.now();
        const validEnd = grantedAt + lease.remainingMs;
        holders++;
        maxHolders = Math.max(maxHolders, holders);
        await sleep(Math.random() * 3);
        holders--;
        grants.push({ acquirer: id, token: lease.token, grantedAt, releasedAt: performance.now(), validEnd });
        await lease.release();
      }
    };
    await Promise.all(locks.map((redlock, id) => acquirer(id, redlock)));

    grants.sort((a, b) => a.grantedAt - b.grantedAt);
    console.info(
      `contention: ${grants.length} grants to ${new Set(grants.map((g) => g.acquirer)).size} acquirers, tokens ${grants[0]?.token}..${grants.at(-1)?.token}`,
    );
    expect(grants.length).toBeGreaterThan(100);
    // The leases did not run out while held (otherwise the overlap check below would be vacuous for them).
    expect(grants.filter((g) => g.releasedAt > g.validEnd)).toEqual([]);
    for (let i = 1; i < grants.length; i++) {
      const prev = grants[i - 1]!;
      const next = grants[i]!;
      // A lease is valid from its grant until it is released (or its validity ends, whichever is first);
      // the next grant may only come after that.
      expect(
        next.grantedAt,
        `grant ${i} (acquirer ${next.acquirer}, token ${next.token}) overlaps grant ${i - 1} (acquirer ${prev.acquirer}, token ${prev.token})`,
      ).toBeGreaterThan(Math.min(prev.releasedAt, prev.validEnd));
      expect(next.token > prev.token, `token ${next.token} granted after token ${prev.token}`).toBe(true);
    }
    expect(new Set(grants.map((g) => g.token)).size).toBe(grants.length);
    expect(maxHolders).toBe(1);
    // Several acquirers won: the contention was real.
    expect(new Set(grants.map((g) => g.acquirer)).size).toBeGreaterThan(ACQUIRERS / 2);

    // Nothing is left behind, and a majority of counters reached the last token.
    await expect.poll(() => leaseValuesOn(t.admin, resource), { timeout: 2_000 }).toEqual(Array(5).fill(null));
    const last = grants[grants.length - 1]!.token;
    const counters = await countersOn(t.admin, resource);
    expect(counters.filter((c) => c >= last).length).toBeGreaterThanOrEqual(3);
    expect(maxOf(counters)).toBeGreaterThanOrEqual(last);
    const after = await new Redlock(t.clients, { retryCount: 5, retryDelayMs: 20 }).acquire(resource, TTL_MS);
    expect(after.token > last).toBe(true);
    await after.release();
  });
});
