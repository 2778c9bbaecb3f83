import { subscribe, unsubscribe } from "node:diagnostics_channel";
import type { Redis } from "ioredis";
import { ANSWERING_NODE_TIMEOUT_MS } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LeaseLostError } from "./errors.js";
import type { Lease } from "./lease.js";
import { LOCK_CHANNELS, type LockOperationMessage } from "./observe.js";
import { Redlock } from "./redlock.js";
import { drained, leaseValuesOn, nodesRun, ORDERS, startTestNodes, type TestNodes } from "./test-support.js";

/** EVALSHA and EVAL calls served, summed over the nodes. */
async function scriptCalls(admin: readonly Redis[]): Promise<number> {
  let total = 0;
  for (const redis of admin) {
    const stats = await redis.info("commandstats");
    for (const [, calls] of stats.matchAll(/^cmdstat_eval(?:sha)?:calls=(\d+)/gm)) total += Number(calls);
  }
  return total;
}

function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    (value) => ({ resolved: value }),
    (err: unknown) => err,
  );
}

function expectReleased(error: unknown, lease: Lease): void {
  expect(error).toBeInstanceOf(LeaseLostError);
  expect((error as LeaseLostError).kind).toBe("released");
  expect((error as LeaseLostError).token).toBe(lease.token);
}

describe("a lease that was released says `released`", () => {
  let t: TestNodes;
  let redlock: Redlock;

  beforeAll(async () => {
    t = await startTestNodes(3);
    // No node is silent here, and the tests name every node's answer (not-held): a node timeout far above
    // any answer, so that a busy machine cannot turn one into a timeout.
    redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
  });
  afterAll(async () => {
    await t?.stop();
  });

  for (const order of ORDERS) {
    it(`lease.extend() under way when the lease is released rejects with \`released\`, its signal's reason (${order} on the nodes)`, async () => {
      const resource = `released/under-way/${order}`;
      const lease = await redlock.acquire(resource, 5_000);
      const signal = lease.signal;
      await nodesRun(order, t.admin);
      const extending = rejection(lease.extend(5_000));
      await lease.release();
      const error = await extending;
      expectReleased(error, lease);
      expect(signal.reason).toBe(error);
      await drained(t.clients);
      expect(await leaseValuesOn(t.admin, resource)).toEqual([null, null, null]);
    });

    it(`redlock.extend(lease) under way when that lease is released rejects with \`released\`, and observers see that, not a loss (${order} on the nodes)`, async () => {
      const resource = `released/held-under-way/${order}`;
      const lease = await redlock.acquire(resource, 5_000);
      await nodesRun(order, t.admin);
      const seen: { extend: LockOperationMessage[]; lost: unknown[] } = { extend: [], lost: [] };
      const onExtend = (m: unknown): void => void seen.extend.push(m as LockOperationMessage);
      const onLost = (m: unknown): void => void seen.lost.push(m);
      subscribe(LOCK_CHANNELS.extend, onExtend);
      subscribe(LOCK_CHANNELS.lost, onLost);
      try {
        const extending = rejection(redlock.extend(lease, 5_000));
        await lease.release();
        expectReleased(await extending, lease);
      } finally {
        unsubscribe(LOCK_CHANNELS.extend, onExtend);
        unsubscribe(LOCK_CHANNELS.lost, onLost);
      }
      expect(seen.lost).toEqual([]);
      expect(seen.extend.map((m) => [m.resources, m.outcome])).toEqual([[[resource], "LEASE_LOST"]]);
      expect(seen.extend[0]?.error).toMatchObject({ kind: "released" });
    });
  }

  it("a release made between the round's success and extend()'s return (by an observer of that success) still rejects extend() with `released`", async () => {
    const resource = "released/as-the-round-ends";
    const lease = await redlock.acquire(resource, 5_000);
    const onExtend = (m: unknown): void => {
      if ((m as LockOperationMessage).resources[0] === resource) void lease.release();
    };
    subscribe(LOCK_CHANNELS.extend, onExtend);
    try {
      expectReleased(await rejection(lease.extend(5_000)), lease);
    } finally {
      unsubscribe(LOCK_CHANNELS.extend, onExtend);
    }
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual([null, null, null]);
  });

  it("`await using`: an extension under way when the block ends rejects with `released`", async () => {
    let extending: Promise<unknown> | undefined;
    let token = 0n;
    {
      await using lease = await redlock.acquire("released/await-using", 5_000);
      token = lease.token;
      await nodesRun("release first", t.admin);
      extending = rejection(lease.extend(5_000));
    }
    const error = await extending;
    expect(error).toBeInstanceOf(LeaseLostError);
    expect(error).toMatchObject({ kind: "released", token });
  });

  it("using(): an extension the routine leaves under way rejects with `released`, and using() resolves with the routine's value", async () => {
    let extending: Promise<unknown> | undefined;
    let held: Lease | undefined;
    const value = await redlock.using("released/using", 5_000, async (lease) => {
      held = lease;
      await nodesRun("release first", t.admin);
      extending = rejection(lease.extend(5_000));
      return "routine done";
    });
    expect(value).toBe("routine done");
    expectReleased(await extending, held as Lease);
    expect((held as Lease).signal.reason).toMatchObject({ kind: "released" });
  });

  it("redlock.extend(lease) of a Lease already released rejects with `released` and sends nothing", async () => {
    const lease = await redlock.acquire("released/held-after", 5_000);
    await lease.release();
    await drained(t.clients);
    const before = await scriptCalls(t.admin);
    expectReleased(await rejection(redlock.extend(lease, 5_000)), lease);
    expect(await scriptCalls(t.admin)).toBe(before);
  });

  it("redlock.release(lease) ends that Lease: its signal aborts with `released`, and extend() rejects with `released`", async () => {
    const resource = "released/by-redlock";
    const lease = await redlock.acquire(resource, 5_000);
    const signal = lease.signal;
    await redlock.release(lease);
    expect(signal.aborted).toBe(true);
    expectReleased(signal.reason, lease);
    expectReleased(await rejection(lease.extend(5_000)), lease);
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual([null, null, null]);
  });

  it("a plain { resource, token, value } released elsewhere is `quorum-lost`, every node `not-held`: the nodes keep no record of a release", async () => {
    const lease = await redlock.acquire("released/plain", 5_000);
    const held = { resource: lease.resource, token: lease.token, value: lease.value };
    await redlock.release(held);
    const error = await rejection(redlock.extend(held, 5_000));
    expect(error).toBeInstanceOf(LeaseLostError);
    expect(error).toMatchObject({
      kind: "quorum-lost",
      nodes: [0, 1, 2].map((node) => ({ node, reason: "not-held" })),
    });
  });
});
