import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { InvalidArgumentError } from "@fenced/fence";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LeaseLostError } from "./errors.js";
import { Redlock } from "./redlock.js";
import { countersOn, drained, leaseValuesOn, loadScripts, startTestNodes, type TestNodes } from "./test-support.js";

/** EVALSHA calls served, summed over the nodes (the scripts are preloaded, so no EVAL fallback). */
async function scriptCalls(admin: readonly Redis[]): Promise<number> {
  let total = 0;
  for (const redis of admin) total += Number(/^cmdstat_evalsha:calls=(\d+)/m.exec(await redis.info("commandstats"))?.[1] ?? 0);
  return total;
}

describe("using() and `await using`", () => {
  let t: TestNodes;
  let redlock: Redlock;

  beforeAll(async () => {
    t = await startTestNodes(3);
    await Promise.all(t.admin.map(loadScripts));
    redlock = new Redlock(t.clients, { retryCount: 0 });
  });
  afterAll(async () => {
    await t?.stop();
  });

  it("`await using` releases the lease on every node when the block ends, also when it throws", async () => {
    let value = "";
    {
      await using lease = await redlock.acquire("dispose/normal", 5_000);
      value = lease.value;
      await drained(t.clients);
      expect(await leaseValuesOn(t.admin, "dispose/normal")).toEqual([value, value, value]);
    }
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, "dispose/normal")).toEqual([null, null, null]);

    let signal: AbortSignal | undefined;
    const failing = async (): Promise<void> => {
      await using lease = await redlock.acquire("dispose/throws", 5_000);
      signal = lease.signal;
      throw new Error("work failed");
    };
    await expect(failing()).rejects.toThrow("work failed");
    expect(signal?.aborted).toBe(true);
    expect((signal?.reason as LeaseLostError).kind).toBe("released");
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, "dispose/throws")).toEqual([null, null, null]);
  });

  it("a routine that releases its own lease is not told it lost it: using() resolves its value, and the lease is gone from every node", async () => {
    let signal: AbortSignal | undefined;
    const result = await redlock.using("using/released-by-routine", 5_000, async (lease) => {
      signal = lease.signal;
      await lease.release();
      return "done";
    });
    expect(result).toBe("done");
    // The signal did abort, with kind "released": what lostWhileRunning must not read as a loss.
    expect((signal?.reason as LeaseLostError).kind).toBe("released");
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, "using/released-by-routine")).toEqual([null, null, null]);
  });

  it("refuses, before acquiring, an extension threshold that leaves no time to wait between extensions", async () => {
    const before = await scriptCalls(t.admin);
    const routine = (): Promise<string> => Promise.resolve("ran");
    // A 400 ms lease is valid for at most 400 - (1 % + 2 ms) = 394 ms: at a threshold of 394 ms or more
    // using() would extend again the moment each extension returns.
    for (const threshold of [394, 400, 10_000]) {
      const eager = new Redlock(t.clients, { retryCount: 0, automaticExtensionThresholdMs: threshold });
      const error = await eager.using("threshold/refused", 400, routine).catch((e: unknown) => e);
      expect(error, `threshold ${threshold}`).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).toBe("options.automaticExtensionThresholdMs");
    }
    // The default threshold is half the longest validity: a TTL whose drift allowance leaves none is refused too
    // (0.99 × 200 + 2 = 200 ms: nothing left).
    const drifty = new Redlock(t.clients, { retryCount: 0, driftFactor: 0.99 });
    await expect(drifty.using("threshold/no-validity", 200, routine)).rejects.toThrow(
      expect.objectContaining({ name: "InvalidArgumentError", argument: "ttlMs" }) as Error,
    );
    expect(await scriptCalls(t.admin)).toBe(before);
    for (const resource of ["threshold/refused", "threshold/no-validity"])
      expect(await countersOn(t.admin, resource)).toEqual([0n, 0n, 0n]);

    // Just below the longest validity is accepted.
    expect(
      await new Redlock(t.clients, { retryCount: 0, automaticExtensionThresholdMs: 390 }).using("threshold/accepted", 400, routine),
    ).toBe("ran");
  });

  it("the default threshold leaves room: over 1.2 s a 400 ms lease is extended every ~200 ms, not back to back", async () => {
    const resource = "threshold/default";
    let extensions = 0;
    /** How long the extensions were counted: 1.2 s, or more when a busy machine wakes the test late. */
    let windowMs = 0;
    await redlock.using(resource, 400, async (lease) => {
      await drained(t.clients);
      const from = performance.now();
      const start = await scriptCalls(t.admin);
      await sleep(1_200);
      extensions = ((await scriptCalls(t.admin)) - start) / 3;
      windowMs = performance.now() - from;
      expect(lease.signal.aborted).toBe(false);
    });
    // Every (400 - 6) / 2 = 197 ms: about 6 rounds in 1.2 s; back to back would be hundreds.
    expect(extensions).toBeGreaterThanOrEqual(4);
    expect(extensions).toBeLessThanOrEqual(Math.ceil(windowMs / 197) + 2);
  });
});
