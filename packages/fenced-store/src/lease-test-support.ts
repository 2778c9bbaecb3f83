import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { LeaseLostError, Redlock, type Lease } from "@fenced/lock";
import { startRedisNodes, type RedisNodes } from "@fenced/servers";
import { Redis } from "ioredis";
import { expect } from "vitest";

/**
 * Real leases for the store tests: a Redlock over one real Redis node. A store knows a lease only
 * structurally (@fenced/store does not depend on @fenced/lock); these tests hand it the real thing.
 */

/** How a lease ends without its holder being told by anyone but the lease itself. */
export type Ending = "released" | "expired";
export const ENDINGS: readonly Ending[] = ["released", "expired"];

export interface LeaseHarness {
  /** A live lease on a resource of its own (the name starts with `label`). */
  live(label: string): Promise<Lease>;
  /**
   * A lease that has ended: released, or acquired for 100 ms and left to run out. Neither its
   * lostReason nor its signal has been read: what the store reads is the first to notice.
   */
  ended(label: string, ending: Ending): Promise<Lease>;
  /** A live lease of several resources, acquired together (one resource of its own per label, in that order): `lease.fences`. */
  liveSet(labels: readonly string[]): Promise<Lease>;
  /** A lease of several resources that has ended, as ended() for one. */
  endedSet(labels: readonly string[], ending: Ending): Promise<Lease>;
  /** A new live lease of exactly these resources (an earlier lease of them released first): the next holder. */
  reacquire(resources: readonly string[]): Promise<Lease>;
  stop(): Promise<void>;
}

const SHORT_TTL_MS = 100;

export async function leaseHarness(): Promise<LeaseHarness> {
  const nodes: RedisNodes = await startRedisNodes(1);
  const clients = nodes.nodes.map((n) => new Redis({ host: n.host, port: n.port, lazyConnect: true }));
  try {
    await Promise.all(clients.map((c) => c.connect()));
  } catch (err) {
    for (const c of clients) c.disconnect();
    await nodes.stop();
    throw err;
  }
  // A node slow under a loaded machine (fsync, two test files at once) is retried, not a failed test.
  const redlock = new Redlock(clients, { retryCount: 5, nodeTimeoutMs: 2_000 });
  // Resource names of their own: REDIS_URLS may point at nodes other runs use too.
  const resource = (label: string): string => `${label}/${randomBytes(4).toString("hex")}`;
  const ended = async (resources: string | string[], ending: Ending): Promise<Lease> => {
    if (ending === "released") {
      const lease = await redlock.acquire(resources, 30_000);
      await lease.release();
      return lease;
    }
    const lease = await redlock.acquire(resources, SHORT_TTL_MS);
    // validUntil (wall clock) and the lease's monotonic deadline were set together: past it, the lease has run out.
    await sleep(Math.max(0, lease.validUntil - Date.now()) + 20);
    return lease;
  };
  return {
    live: (label) => redlock.acquire(resource(label), 30_000),
    ended: (label, ending) => ended(resource(label), ending),
    liveSet: (labels) => redlock.acquire(labels.map(resource), 30_000),
    endedSet: (labels, ending) => ended(labels.map(resource), ending),
    reacquire: (resources) => redlock.acquire([...resources], 30_000),
    async stop() {
      for (const c of clients) c.disconnect();
      await nodes.stop();
    },
  };
}

/**
 * The call's rejection, refused before anything was sent: a new LeaseLostError of the lease's kind
 * saying nothing was applied (`applied: "no"`), with the lease's own error — the one `signal:
 * lease.signal` aborts with — as its cause, and that error left as it was (`applied: "unknown"`: it
 * is shared by everyone holding the lease).
 */
export async function refusedWithItsError(call: Promise<unknown>, lease: Lease, ending: Ending): Promise<void> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(LeaseLostError);
  expect((err as LeaseLostError).kind).toBe(ending);
  expect((err as LeaseLostError).applied).toBe("no");
  expect((err as LeaseLostError).code).toBe("LEASE_LOST");
  expect(err).not.toBe(lease.lostReason);
  expect((err as LeaseLostError).cause).toBe(lease.lostReason);
  expect((err as LeaseLostError).fences).toEqual(lease.lostReason?.fences);
  expect(lease.lostReason?.applied).toBe("unknown");
}
