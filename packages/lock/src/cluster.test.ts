import { Cluster } from "ioredis";
import { Cluster as Cluster6 } from "ioredis-6";
import { ANSWERING_NODE_TIMEOUT_MS, startRedisCluster, type RedisCluster } from "@fenced/servers";
import { performance } from "node:perf_hooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { redisErrorCode, type RedisClient } from "./client.js";
import { LockNotAcquiredError } from "./errors.js";
import { resourceKeys } from "./keys.js";
import { Redlock } from "./redlock.js";
import { IOREDIS_MAJORS, type IoredisMajor } from "./test-support.js";

/** Resources whose keys land in different slots, including braces that could break a naive hash tag. */
const RESOURCES = ["orders/1", "orders/2", "invoices/7", "a{b}c", "}starts-with-brace", "{", "}", "{}", "x}{y"];

describe("Redlock over a Redis Cluster (one client, lock key and counter in one slot)", () => {
  let cluster: RedisCluster;
  let client: Cluster;
  let other: Cluster;
  /** The lock's clients per ioredis major (a peer dependency, 5 or 6): two of each, for two lock users. */
  const lockClients = new Map<IoredisMajor, [RedisClient, RedisClient]>();

  beforeAll(async () => {
    cluster = await startRedisCluster(3);
    client = new Cluster(cluster.startupNodes, { clusterRetryStrategy: () => null });
    other = new Cluster(cluster.startupNodes, { clusterRetryStrategy: () => null });
    const six = (): Cluster6 => new Cluster6(cluster.startupNodes, { clusterRetryStrategy: () => null });
    lockClients.set(5, [client, other]);
    lockClients.set(6, [six(), six()]);
  });
  afterAll(async () => {
    client?.disconnect();
    other?.disconnect();
    for (const [, pair] of lockClients) for (const c of pair) (c as Cluster | Cluster6).disconnect();
    await cluster?.stop();
  });

  async function slotOf(key: string): Promise<number> {
    return Number(await client.cluster("KEYSLOT", key));
  }

  it("keeps both keys of every resource in one slot, and the resources spread over several masters", async () => {
    // Redis refuses a script whose keys span slots: the property below is what makes the lock work here.
    expect(redisErrorCode(await client.eval("return 1", 2, "fenced:a:lease", "fenced:a:token").catch((e: unknown) => e))).toBe("CROSSSLOT");
    const slots: number[] = [];
    for (const resource of RESOURCES) {
      const { lease, counter } = resourceKeys(resource);
      const slot = await slotOf(lease);
      expect(await slotOf(counter), resource).toBe(slot);
      slots.push(slot);
    }
    // Which master serves which slot.
    const ranges = await client.cluster("SLOTS");
    const masterOf = (slot: number): string => {
      const range = ranges.find(([from, to]) => slot >= from && slot <= to);
      const master = range?.[2];
      if (master === undefined) throw new Error(`slot ${slot} is not served`);
      return `${master[0]}:${master[1]}`;
    };
    expect(new Set(slots).size).toBeGreaterThanOrEqual(5);
    expect(new Set(slots.map(masterOf)).size).toBe(3);
  });

  it.each(RESOURCES.flatMap((resource) => IOREDIS_MAJORS.map((major) => [resource, major] as const)))(
    "acquire, extend and release work for %j on ioredis %i",
    async (resource, major) => {
      const [mine, theirs] = lockClients.get(major)!;
      // The cluster is up and must answer: a node timeout far above any answer, so that a busy machine
      // cannot turn an answer (a grant, "held") into a timeout.
      const answering = { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS };
      const redlock = new Redlock([mine], answering);
      expect(redlock.quorum).toBe(1);
      const { lease: leaseKey, counter } = resourceKeys(resource);

      const first = await redlock.acquire(resource, 2_000);
      expect(first.resource).toBe(resource);
      expect(await client.get(leaseKey)).toBe(first.value);
      expect(await client.get(counter)).toBe(first.token.toString());
      const pttl = await client.pttl(leaseKey);
      expect(pttl).toBeGreaterThan(0);
      expect(pttl).toBeLessThanOrEqual(2_000);

      // Exclusive for another client of the same cluster.
      const refused = await new Redlock([theirs], answering).acquire(resource, 2_000).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(LockNotAcquiredError);
      expect((refused as LockNotAcquiredError).nodes).toEqual([{ node: 0, reason: "held" }]);

      await first.extend(30_000);
      expect(await client.pttl(leaseKey)).toBeGreaterThan(29_000);
      await first.release();
      expect(await client.get(leaseKey)).toBeNull();

      const second = await new Redlock([theirs], answering).acquire(resource, 2_000);
      expect(second.token).toBe(first.token + 1n);
      expect(await client.get(counter)).toBe(second.token.toString());
      await second.release();
      expect(await client.get(leaseKey)).toBeNull();
    },
  );

  it("using() works through the cluster client", async () => {
    const redlock = new Redlock([client], { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    const resource = "cluster/using";
    const token = await redlock.using(resource, 600, async (lease) => {
      await new Promise((r) => setTimeout(r, 1_300));
      expect(lease.signal.aborted).toBe(false);
      expect(await client.get(resourceKeys(resource).lease)).toBe(lease.value);
      return lease.token;
    });
    expect(token).toBe(1n);
    expect(await client.get(resourceKeys(resource).lease)).toBeNull();
  });
});

describe("a Redis Cluster whose nodes are all down", () => {
  it("is not known down (ioredis reports its nodes' refusals to it without a code): a round waits nodeTimeoutMs for it", async () => {
    const cluster = await startRedisCluster(3);
    const client = new Cluster(cluster.startupNodes);
    try {
      const errors: unknown[] = [];
      client.on("error", (err) => errors.push(err));
      const redlock = new Redlock([client], { retryCount: 0, nodeTimeoutMs: 300 });
      // While it is up the cluster must answer, within a node timeout far above any answer (a busy machine can make it miss 300 ms).
      await (
        await new Redlock([client], { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS }).acquire("cluster/down", 10_000)
      ).release();
      await cluster.stop();

      const start = performance.now();
      const error = await redlock.acquire("cluster/down", 10_000).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockNotAcquiredError);
      expect((error as LockNotAcquiredError).nodes).toEqual([{ node: 0, reason: "timeout" }]);
      expect(performance.now() - start).toBeGreaterThanOrEqual(290);
      // What the Cluster emitted meanwhile: the last node's error is the closed connection, not the refusal.
      await expect.poll(() => errors.length, { timeout: 5_000 }).toBeGreaterThan(0);
      expect(errors[0]).toMatchObject({ message: "Failed to refresh slots cache.", lastNodeError: { message: "Connection is closed." } });
      expect((errors[0] as { lastNodeError: { code?: unknown } }).lastNodeError.code).toBeUndefined();
    } finally {
      client.disconnect();
      await cluster.stop();
    }
  });
});
