import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ANSWERING_NODE_TIMEOUT_MS } from "@fenced/servers";
import { resourceKeys } from "./keys.js";
import { Redlock } from "./redlock.js";
import { leaseKeysOn } from "./sets-test-support.js";
import { countersOn, drained, holdAs, loadScripts, maxOf, ready, startTestNodes, type TestNodes } from "./test-support.js";

/**
 * The article's clock jump, and a node wiped, for leases of several resources: what clock-jump.test.ts
 * and faults.test.ts show for one resource holds for each resource of a set (PROTOCOL.md, "Sets").
 */
describe("a set under the article's clock jump on node C", () => {
  let t: TestNodes;
  beforeAll(async () => {
    t = await startTestNodes(5, { clockControl: [2] });
    await Promise.all(t.admin.map(loadScripts));
  });
  afterAll(async () => {
    t?.nodes[2]?.setClockOffsetMs(0);
    await t?.stop();
  });

  it("two clients both hold [a, b] at once; each resource's token is larger for the later one, and stays unique after", async () => {
    const [a, b] = ["jump/a", "jump/b"];
    const ttl = 10_000;
    const [, , nodeC] = t.nodes;
    const client1 = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    const client2Clients = await t.moreClients();
    const client2 = new Redlock(client2Clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    const client3 = new Redlock(await t.moreClients(), { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });

    // a was locked alone before, on every node: the two counters differ from here on.
    await (await client1.acquire(a, ttl)).release();
    // D and E hold b for someone else: they refuse the whole set, and client 1 gets exactly A, B, C.
    for (const redis of t.admin.slice(3)) await holdAs(redis, b, "elsewhere", 60_000);
    const lease1 = await client1.acquire([a, b], ttl);
    await drained(t.clients);
    expect(lease1.fences.map((f) => f.token)).toEqual([2n, 1n]);
    const v1 = lease1.value;
    expect(await leaseKeysOn(t.admin, [a, b])).toEqual([
      [v1, v1],
      [v1, v1],
      [v1, v1],
      [null, "elsewhere"],
      [null, "elsewhere"],
    ]);
    // D and E refused without taking a or moving its counter.
    expect(await countersOn(t.admin, a)).toEqual([2n, 2n, 2n, 1n, 1n]);
    expect(await countersOn(t.admin, b)).toEqual([1n, 1n, 1n, 0n, 0n]);

    // C's wall clock jumps past the TTL: C drops both of client 1's keys at once.
    nodeC!.setClockOffsetMs(2 * ttl);
    await expect.poll(async () => (await leaseKeysOn([t.admin[2]!], [a, b]))[0], { timeout: 2_000, interval: 10 }).toEqual([null, null]);

    // D and E come free; client 2 asks for [b, a] and gets C, D, E while A and B refuse.
    for (const redis of t.admin.slice(3)) await redis.del(resourceKeys(b).lease);
    const lease2 = await client2.acquire([b, a], ttl);
    await drained(client2Clients);
    const v2 = lease2.value;
    expect(await leaseKeysOn(t.admin, [a, b])).toEqual([
      [v1, v1],
      [v1, v1],
      [v2, v2],
      [v2, v2],
      [v2, v2],
    ]);

    // Both believe they hold both resources, by their own clocks.
    for (const lease of [lease1, lease2]) {
      expect(lease.remainingMs).toBeGreaterThan(0);
      expect(lease.signal.aborted).toBe(false);
    }
    // Per resource, the tokens order them: C's INCR gave b 2 and a 3; D and E (1 and 2) were published to.
    expect(lease2.fences.map((f) => [f.resource, f.token])).toEqual([
      [b, 2n],
      [a, 3n],
    ]);
    for (const f of lease2.fences) expect(f.token > lease1.fences.find((g) => g.resource === f.resource)!.token).toBe(true);
    expect(await countersOn(t.admin, a)).toEqual([2n, 2n, 3n, 3n, 3n]);
    expect(await countersOn(t.admin, b)).toEqual([1n, 1n, 2n, 2n, 2n]);

    // A third client wanting a alone while both hold it: A and B refuse (client 1), C, D, E refuse (client 2).
    await expect(client3.acquire(a, ttl)).rejects.toMatchObject({ name: "LockNotAcquiredError" });
    // Client 1 finds out at its next extension (2 of 5 confirm); client 2's succeeds.
    await expect(lease1.extend(ttl)).rejects.toMatchObject({ kind: "quorum-lost", fences: [{ resource: a }, { resource: b }] });
    await lease2.extend(ttl);
    await Promise.all([lease1.release(), lease2.release()]);
    nodeC!.setClockOffsetMs(0);

    // And on: each resource's next token is past both holders', whichever form asks for it.
    const next = await client3.acquire(a, ttl);
    expect(next.token).toBe(4n);
    await next.release();
    const nextSet = await client3.acquire([a, b], ttl);
    expect(nextSet.fences.map((f) => f.token)).toEqual([5n, 3n]);
    await nextSet.release();
  });
});

/** PROTOCOL.md, "What a node must keep across restarts", for a set. */
describe("a set when a node restarts without its data", () => {
  let t: TestNodes;
  beforeAll(async () => {
    t = await startTestNodes(5, { faults: true, persistence: "fsync-always" }, { failFast: true });
    await Promise.all(t.admin.map(loadScripts));
  });
  afterEach(async () => {
    await Promise.all(t.nodes.map((node, i) => (node.running ? Promise.resolve() : restart(t, i, true))));
  });
  afterAll(async () => {
    await t?.stop();
  });

  /**
   * q's counters [10, 10, 0, 3, 3] and r's [8, 8, 0, 3, 3] on A..E: D and E were down for the last
   * acquisitions (and came back with their data), then C was wiped. Returns the tokens handed out, by resource.
   */
  async function lagBehindAndWipeC(redlock: Redlock, q: string, r: string): Promise<Map<string, bigint[]>> {
    const tokens = new Map<string, bigint[]>([
      [q, []],
      [r, []],
    ]);
    const take = async (resources: readonly string[]): Promise<void> => {
      const lease = await redlock.acquire(resources, 5_000);
      for (const f of lease.fences) tokens.get(f.resource)!.push(f.token);
      await lease.release();
    };
    for (let i = 0; i < 3; i++) await take([q, r]);
    await released(t, [q, r]);
    await Promise.all([t.nodes[3]!.kill(), t.nodes[4]!.kill()]);
    for (let i = 0; i < 5; i++) await take(i % 2 === 0 ? [r, q] : [q, r]);
    for (let i = 0; i < 2; i++) await take([q]);
    await released(t, [q, r]);
    await Promise.all([restart(t, 3, true), restart(t, 4, true)]);
    await restart(t, 2, false);
    expect(await countersOn(t.admin, q)).toEqual([10n, 10n, 0n, 3n, 3n]);
    expect(await countersOn(t.admin, r)).toEqual([8n, 8n, 0n, 3n, 3n]);
    expect(tokens.get(q)).toEqual([1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n, 10n]);
    expect(tokens.get(r)).toEqual([1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n]);
    return tokens;
  }

  it("wiped C, and A and B refusing the set because q is held there: their counters in the refusal push each token past every earlier one", async () => {
    const [q, r] = ["wipe/q", "wipe/r"];
    const redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    const earlier = await lagBehindAndWipeC(redlock, q, r);
    // Another lease holds q alone on A and B. They refuse the set, reporting r at 8 and q at 10; C, D
    // and E grant with 1, 4, 4 for both, whose maximum, 4, repeats tokens handed out before.
    for (const redis of t.admin.slice(0, 2)) await holdAs(redis, q, "another-holder", 10_000);
    const lease = await redlock.acquire([r, q], 5_000);
    expect(lease.fences.map((f) => [f.resource, f.token])).toEqual([
      [r, 9n],
      [q, 11n],
    ]);
    for (const f of lease.fences) expect(f.token > maxOf(earlier.get(f.resource)!)).toBe(true);
    expect(await countersOn(t.admin, r)).toEqual([8n, 8n, 9n, 9n, 9n]);
    expect(await countersOn(t.admin, q)).toEqual([10n, 10n, 11n, 11n, 11n]);
    await lease.release();
    await released(t, [r]);
    for (const redis of t.admin.slice(0, 2)) await redis.del(resourceKeys(q).lease);
  });

  it("wiped C, and A and B down: both tokens go backwards — why lock nodes must keep appendonly yes + appendfsync always", async () => {
    const [q, r] = ["wipe-down/q", "wipe-down/r"];
    const redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    const earlier = await lagBehindAndWipeC(redlock, q, r);
    await Promise.all([t.nodes[0]!.kill(), t.nodes[1]!.kill()]);
    // Nobody reports 8 or 10 now: C, D and E grant with 1, 4, 4, and the lock hands out 4 again for both.
    const lease = await redlock.acquire([q, r], 5_000);
    expect(lease.fences.map((f) => f.token)).toEqual([4n, 4n]);
    for (const f of lease.fences) expect(earlier.get(f.resource)).toContain(f.token);
    await lease.release();
  });
});

/** Waits until no running node holds a lease key of these resources. */
async function released(t: TestNodes, resources: readonly string[]): Promise<void> {
  const running = t.admin.filter((_, i) => t.nodes[i]!.running);
  await expect
    .poll(async () => (await leaseKeysOn(running, resources)).flat().filter((v) => v !== null), { timeout: 10_000, interval: 5 })
    .toEqual([]);
}

async function restart(t: TestNodes, index: number, keepData: boolean): Promise<void> {
  await t.nodes[index]!.restart({ keepData });
  await Promise.all([ready(t.clients[index]!), ready(t.admin[index]!)]);
  await loadScripts(t.admin[index]!);
}
