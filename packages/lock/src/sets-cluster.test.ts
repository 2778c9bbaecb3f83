import { performance } from "node:perf_hooks";
import { Cluster } from "ioredis";
import { Cluster as Cluster6 } from "ioredis-6";
import { InvalidArgumentError } from "@fenced/fence";
import { ANSWERING_NODE_TIMEOUT_MS, startRedisCluster, type RedisCluster } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RedisClient } from "./client.js";
import { LockNotAcquiredError } from "./errors.js";
import { resourceKeys } from "./keys.js";
import { Redlock } from "./redlock.js";
import { IOREDIS_MAJORS, type IoredisMajor } from "./test-support.js";

/**
 * PROTOCOL.md, "Sets", Redis Cluster: a set's keys go to one script on one node, so they must share a
 * slot. Resources share one when their text up to the first "}" is the same.
 */
describe("sets of resources on a Redis Cluster", () => {
  let cluster: RedisCluster;
  let admin: Cluster;
  const lockClients = new Map<IoredisMajor, [RedisClient, RedisClient]>();

  beforeAll(async () => {
    cluster = await startRedisCluster(3);
    const options = { clusterRetryStrategy: () => null };
    admin = new Cluster(cluster.startupNodes, options);
    lockClients.set(5, [new Cluster(cluster.startupNodes, options), new Cluster(cluster.startupNodes, options)]);
    lockClients.set(6, [new Cluster6(cluster.startupNodes, options), new Cluster6(cluster.startupNodes, options)]);
  });
  afterAll(async () => {
    admin?.disconnect();
    for (const [, pair] of lockClients) for (const c of pair) (c as Cluster | Cluster6).disconnect();
    await cluster?.stop();
  });

  const slotOf = async (key: string): Promise<number> => Number(await admin.cluster("KEYSLOT", key));
  const keysOf = (resources: readonly string[]): string[] => resources.flatMap((r) => [resourceKeys(r).lease, resourceKeys(r).counter]);

  it.each(IOREDIS_MAJORS)("a set with a common {tag} is granted whole, with a token for each resource (ioredis %i)", async (major) => {
    const [mine, theirs] = lockClients.get(major)!;
    const set = [`{accounts-${major}}:alice`, `{accounts-${major}}:bob`, `{accounts-${major}}:carol`];
    // Every key of the set, lease keys and counters, hashes to one slot.
    expect(new Set(await Promise.all(keysOf(set).map(slotOf))).size).toBe(1);

    // The cluster is up and its answers are named ("held"): a node timeout far above any answer, so that
    // a busy machine cannot turn one into a timeout.
    const redlock = new Redlock([mine], { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    const lease = await redlock.acquire(set, 2_000);
    expect(lease.fences.map((f) => [f.resource, f.token])).toEqual(set.map((r) => [r, 1n]));
    for (const r of set) expect(await admin.get(resourceKeys(r).lease)).toBe(lease.value);

    // Exclusive: another client of the cluster is refused one of them, alone or in another set of the tag.
    const other = new Redlock([theirs], { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    for (const wanted of [set[1]!, [`{accounts-${major}}:dave`, set[2]!]]) {
      const refused = await other.acquire(wanted, 2_000).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(LockNotAcquiredError);
      expect((refused as LockNotAcquiredError).nodes).toEqual([{ node: 0, reason: "held" }]);
    }
    expect(await admin.get(resourceKeys(`{accounts-${major}}:dave`).lease)).toBeNull();

    await lease.extend(30_000);
    for (const r of set) expect(await admin.pttl(resourceKeys(r).lease)).toBeGreaterThan(29_000);
    await lease.release();
    for (const r of set) expect(await admin.get(resourceKeys(r).lease)).toBeNull();

    const next = await other.acquire([set[2]!, set[0]!], 2_000);
    expect(next.fences.map((f) => f.token)).toEqual([2n, 2n]);
    await next.release();
  });

  it.each(IOREDIS_MAJORS)(
    "a set in different slots is refused with InvalidArgumentError at once, no retry, and leaves no key anywhere (ioredis %i)",
    async (major) => {
      const [mine] = lockClients.get(major)!;
      // Default retries, a long delay between them: an error that was retried would take a second or more.
      const redlock = new Redlock([mine], { retryDelayMs: 1_000 });
      for (const set of [
        [`orders/${major}`, `invoices/${major}`],
        [`{accounts}:erin-${major}`, `orders/${major}/2`],
        [`{accounts}:frank-${major}`, `{Accounts}:grace-${major}`],
      ]) {
        const slots = await Promise.all(set.map((r) => slotOf(resourceKeys(r).lease)));
        expect(new Set(slots).size, `${set.join()} in slots ${slots.join()}`).toBe(2);
        const started = performance.now();
        const error = await redlock.acquire(set, 2_000).catch((e: unknown) => e);
        expect(performance.now() - started).toBeLessThan(1_000);
        expect(error, set.join()).toBeInstanceOf(InvalidArgumentError);
        expect((error as InvalidArgumentError).argument).toBe("resources");
        expect((error as Error).message).toMatch(/different Redis Cluster slots.*\{accounts\}:alice/);
        for (const key of keysOf(set)) expect(await admin.get(key), key).toBeNull();
        // using() likewise, before the routine runs.
        let ran = false;
        await expect(
          redlock.using(set, 2_000, () => {
            ran = true;
            return Promise.resolve();
          }),
        ).rejects.toBeInstanceOf(InvalidArgumentError);
        expect(ran).toBe(false);
      }
      // One resource of a refused set is free: nothing of the refused attempts holds it.
      const lease = await redlock.acquire(`orders/${major}`, 2_000);
      expect(lease.token).toBe(1n);
      await lease.release();
    },
  );
});
