import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { LeaseLostError, LockNotAcquiredError } from "./errors.js";
import { LOCK_CHANNELS, type LockLostMessage, type LockOperationMessage } from "./index.js";
import { Redlock } from "./redlock.js";
import { startTestNodes, type TestNodes } from "./test-support.js";

/** What one channel received while subscribed; unsubscribed after each test. */
function listen<T>(name: string): T[] {
  const seen: T[] = [];
  const listener = (message: unknown): void => {
    seen.push(message as T);
  };
  subscribe(name, listener);
  subscriptions.push(() => unsubscribe(name, listener));
  return seen;
}
const subscriptions: (() => void)[] = [];

describe("the lock's diagnostics channels (README, Observing the lock)", () => {
  let t: TestNodes;
  let redlock: Redlock;

  beforeAll(async () => {
    t = await startTestNodes(3);
    redlock = new Redlock(t.clients, { retryCount: 0 });
  });
  afterEach(() => {
    for (const stop of subscriptions.splice(0)) stop();
  });
  afterAll(async () => {
    await t?.stop();
  });

  it("fenced:lock:acquire, extend and release carry the resource, token, holder and outcome of each operation", async () => {
    const acquired = listen<LockOperationMessage>(LOCK_CHANNELS.acquire);
    const extended = listen<LockOperationMessage>(LOCK_CHANNELS.extend);
    const released = listen<LockOperationMessage>(LOCK_CHANNELS.release);
    const lease = await redlock.acquire("observe/one", 5_000);
    await lease.extend(6_000);
    await lease.release();

    expect(acquired).toEqual([
      expect.objectContaining({
        operation: "acquire",
        resources: ["observe/one"],
        fences: [{ resource: "observe/one", token: lease.token }],
        holder: lease.holder,
        ttlMs: 5_000,
        outcome: "ok",
      }),
    ]);
    expect(acquired[0]?.durationMs).toBeGreaterThan(0);
    expect(extended).toEqual([
      expect.objectContaining({ operation: "extend", resources: ["observe/one"], holder: lease.holder, ttlMs: 6_000, outcome: "ok" }),
    ]);
    expect(extended[0]?.validUntil).toBe(lease.validUntil);
    expect(released).toEqual([
      expect.objectContaining({ operation: "release", fences: [{ resource: "observe/one", token: lease.token }], outcome: "ok" }),
    ]);
  });

  it("a refused acquire is published with its error's code as the outcome, and no fences", async () => {
    const acquired = listen<LockOperationMessage>(LOCK_CHANNELS.acquire);
    const held = await redlock.acquire(["observe/a", "observe/b"], 5_000);
    await expect(redlock.acquire("observe/b", 5_000)).rejects.toBeInstanceOf(LockNotAcquiredError);
    await held.release();

    expect(acquired.map((m) => m.outcome)).toEqual(["ok", "LOCK_NOT_ACQUIRED"]);
    expect(acquired[0]?.fences?.map((f) => f.resource)).toEqual(["observe/a", "observe/b"]);
    expect(acquired[1]).toMatchObject({ resources: ["observe/b"] });
    expect(acquired[1]?.fences).toBeUndefined();
    expect(acquired[1]?.error).toBeInstanceOf(LockNotAcquiredError);
  });

  it("fenced:lock:lost tells a lease that expired, and not one that was released", async () => {
    const lost = listen<LockLostMessage>(LOCK_CHANNELS.lost);
    const released = await redlock.acquire("observe/released", 5_000);
    await released.release();
    const expiring = await redlock.acquire("observe/expiring", 150);
    // The signal's timer marks the lease lost at its end: wait for that, never a fixed time.
    await new Promise((resolve) => expiring.signal.addEventListener("abort", resolve, { once: true }));

    expect(lost).toHaveLength(1);
    expect(lost[0]).toMatchObject({ resources: ["observe/expiring"], fences: [{ resource: "observe/expiring", token: expiring.token }] });
    expect(lost[0]?.kind).toBe("expired");
    expect(lost[0]?.error).toBeInstanceOf(LeaseLostError);
  });
});
