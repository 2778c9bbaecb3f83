import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ANSWERING_NODE_TIMEOUT_MS } from "@fenced/servers";
import { resourceKeys } from "./keys.js";
import { Redlock } from "./redlock.js";
import { countersOn, holdAs, leaseValuesOn, loadScripts, startTestNodes, type TestNodes } from "./test-support.js";

/**
 * Kleppmann's "How to do distributed locking" scenario, with a real clock jump on node C:
 * 1. client 1 acquires the lock on A, B, C (D and E are unreachable for it);
 * 2. the clock on C jumps forward, causing the lock to expire on C;
 * 3. client 2 acquires the lock on C, D, E (A and B are unreachable for it, they still hold client 1's key);
 * 4. clients 1 and 2 now both believe they hold the lock.
 * Fencing is what still orders them: client 2's token is larger, so a store that ratchets tokens
 * refuses client 1's writes from then on.
 */
describe("the article's clock jump on node C", () => {
  let t: TestNodes;
  beforeAll(async () => {
    t = await startTestNodes(5, { clockControl: [2] });
    await Promise.all(t.admin.map(loadScripts));
  });
  afterAll(async () => {
    await t?.stop();
  });

  it("two clients both hold valid leases at once, and client 2's token is larger than client 1's", async () => {
    const resource = "article/clock-jump";
    const ttl = 10_000;
    const [, , nodeC] = t.nodes;
    const client1 = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    const client2 = new Redlock(await t.moreClients(), { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });

    // D and E are held by someone else while client 1 acquires: client 1 gets exactly A, B, C.
    for (const redis of t.admin.slice(3)) await holdAs(redis, resource, "elsewhere", 60_000);
    const lease1 = await client1.acquire(resource, ttl);
    expect(lease1.token).toBe(1n);
    expect(await leaseValuesOn(t.admin, resource)).toEqual([lease1.value, lease1.value, lease1.value, "elsewhere", "elsewhere"]);
    expect(await countersOn(t.admin, resource)).toEqual([1n, 1n, 1n, 0n, 0n]);

    // C's wall clock jumps past the TTL: Redis 7 expires by wall clock, so C drops client 1's key at once.
    nodeC!.setClockOffsetMs(2 * ttl);
    const deadline = Date.now() + 2_000;
    while ((await t.admin[2]!.exists(resourceKeys(resource).lease)) === 1) {
      if (Date.now() > deadline) throw new Error("node C did not drop the key after its clock jumped");
      await new Promise((r) => setTimeout(r, 10));
    }
    // A and B still hold client 1's key for most of the TTL: nothing wrong happened on them.
    for (const redis of t.admin.slice(0, 2)) expect(await redis.pttl(resourceKeys(resource).lease)).toBeGreaterThan(ttl - 2_000);

    // D and E come free; client 2 gets C, D, E while A and B refuse.
    for (const redis of t.admin.slice(3)) await redis.del(resourceKeys(resource).lease);
    const lease2 = await client2.acquire(resource, ttl);
    expect(await leaseValuesOn(t.admin, resource)).toEqual([lease1.value, lease1.value, lease2.value, lease2.value, lease2.value]);

    // Both believe they hold the lock, by their own clocks — Redlock's known weakness, shown for real.
    const now = Date.now();
    expect(lease1.validUntil).toBeGreaterThan(now);
    expect(lease2.validUntil).toBeGreaterThan(now);
    expect(lease1.remainingMs).toBeGreaterThan(0);
    expect(lease2.remainingMs).toBeGreaterThan(0);
    expect(lease1.signal.aborted).toBe(false);
    expect(lease2.signal.aborted).toBe(false);

    // Fencing orders them: C's counter went 1 → 2 for client 2, D and E were raised to 2 by the publish step.
    expect(lease2.token).toBe(2n);
    expect(lease2.token).toBeGreaterThan(lease1.token);
    expect(await countersOn(t.admin, resource)).toEqual([1n, 1n, 2n, 2n, 2n]);

    // Client 1 only finds out when it next extends: A and B confirm, 2 of 5 is not a majority …
    await expect(lease1.extend(ttl)).rejects.toMatchObject({ kind: "quorum-lost" });
    // … while client 2's succeeds.
    await lease2.extend(ttl);
    expect(lease2.signal.aborted).toBe(false);
    await Promise.all([lease1.release(), lease2.release()]);
    nodeC!.setClockOffsetMs(0);
  });
});
