import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import type { Redis } from "ioredis";
import { ANSWERING_NODE_TIMEOUT_MS } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError } from "@fenced/fence";
import { LeaseLostError, LockNotAcquiredError } from "./errors.js";
import { resourceKeys } from "./keys.js";
import { Redlock, type AcquireOptions, type RedlockOptions } from "./redlock.js";
import { counterOn, countersOn, drained, holdAs, leaseValuesOn, loadScripts, startTestNodes, type TestNodes } from "./test-support.js";

/** Calls of every command except INFO (which the probing itself issues), summed over the nodes. */
async function commandsServed(admin: readonly Redis[]): Promise<number> {
  let total = 0;
  for (const redis of admin) {
    const stats = await redis.info("commandstats");
    for (const [, name, calls] of stats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) if (name !== "info") total += Number(calls);
  }
  return total;
}

function pttls(admin: readonly Redis[], resource: string): Promise<number[]> {
  return Promise.all(admin.map((r) => r.pttl(resourceKeys(resource).lease)));
}

describe("Redlock over 5 nodes", () => {
  let t: TestNodes;
  let redlock: Redlock;

  beforeAll(async () => {
    t = await startTestNodes(5);
    // Preloaded, so that drained() is exact (see there).
    await Promise.all(t.admin.map(loadScripts));
    // No node is ever silent here, and the tests name each node's answer: a node timeout far above any
    // answer, so that a busy machine cannot turn one into a timeout.
    redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
  });
  afterAll(async () => {
    await t?.stop();
  });

  it("rejects bad input with InvalidArgumentError before sending anything to Redis", async () => {
    const before = await commandsServed(t.admin);
    const invalid = (argument: string): InvalidArgumentError =>
      expect.objectContaining({ name: "InvalidArgumentError", argument }) as InvalidArgumentError;
    const constructors: [() => unknown, string][] = [
      [() => new Redlock([]), "clients"],
      [() => new Redlock(undefined as unknown as Redis[]), "clients"],
      [() => new Redlock([t.clients[0]!, {} as Redis]), "clients[1]"],
      [() => new Redlock(t.clients, null as unknown as RedlockOptions), "options"],
      [() => new Redlock(t.clients, { retryCount: -1 }), "options.retryCount"],
      [() => new Redlock(t.clients, { retryCount: 1.5 }), "options.retryCount"],
      [() => new Redlock(t.clients, { retryDelayMs: Number.NaN }), "options.retryDelayMs"],
      [() => new Redlock(t.clients, { retryJitterMs: 2 ** 31 }), "options.retryJitterMs"],
      [() => new Redlock(t.clients, { nodeTimeoutMs: 0 }), "options.nodeTimeoutMs"],
      [() => new Redlock(t.clients, { driftFactor: -0.1 }), "options.driftFactor"],
      [() => new Redlock(t.clients, { driftFactor: 1 }), "options.driftFactor"],
      [() => new Redlock(t.clients, { extensionAttempts: 0 }), "options.extensionAttempts"],
      [() => new Redlock(t.clients, { automaticExtensionThresholdMs: -1 }), "options.automaticExtensionThresholdMs"],
    ];
    for (const [make, argument] of constructors) {
      expect(make).toThrow(InvalidArgumentError);
      expect(make).toThrow(invalid(argument));
    }
    // Explicit undefined means "the default" (exactOptionalPropertyTypes allows it in the types too).
    expect(new Redlock(t.clients, { retryCount: undefined, driftFactor: undefined, automaticExtensionThresholdMs: undefined }).quorum).toBe(
      3,
    );

    // Everything @fenced/fence refuses as a resource, including what the stores could not use.
    const badResources: unknown[] = [
      "",
      "r".repeat(513),
      "line\nbreak",
      "nul\u0000",
      "del\u007f",
      "c1\u0085",
      "lone\ud800",
      "\udc00lone",
      42,
      null,
      undefined,
      Symbol("r"),
    ];
    for (const resource of badResources) {
      await expect(redlock.acquire(resource as string, 1_000)).rejects.toThrow(invalid("resource"));
    }
    for (const ttl of [0, -1, 2 ** 31, 1.5, Number.NaN, Number.POSITIVE_INFINITY, "1000"]) {
      await expect(redlock.acquire("valid", ttl as number)).rejects.toThrow(invalid("ttlMs"));
    }
    await expect(redlock.acquire("valid", 1_000, { retryCount: -1 })).rejects.toThrow(invalid("options.retryCount"));
    await expect(redlock.acquire("valid", 1_000, { signal: {} as AbortSignal })).rejects.toThrow(invalid("options.signal"));
    await expect(redlock.acquire("valid", 1_000, null as unknown as AcquireOptions)).rejects.toThrow(invalid("options"));
    let routineRan = false;
    const routine = (): Promise<void> => {
      routineRan = true;
      return Promise.resolve();
    };
    await expect(redlock.using("", 1_000, routine)).rejects.toThrow(invalid("resource"));
    await expect(redlock.using("valid", 0, routine)).rejects.toThrow(invalid("ttlMs"));
    await expect(redlock.using("valid", 1_000, routine, { retryCount: Number.NaN })).rejects.toThrow(invalid("options.retryCount"));
    await expect(redlock.using("valid", 1_000, "not a function" as unknown as () => Promise<void>)).rejects.toThrow(invalid("routine"));
    expect(routineRan).toBe(false);

    expect(await commandsServed(t.admin)).toBe(before);
    expect(await Promise.all(t.admin.map((r) => r.dbsize()))).toEqual([0, 0, 0, 0, 0]);
  });

  it("keeps tokens exact across 2^52 and 2^53 (integer replies below 2^52, decimal strings above) and up to 2^63 - 1", async () => {
    const resource = "big-counters";
    const { counter } = resourceKeys(resource);
    const seen: bigint[] = [];
    for (const start of [2n ** 52n - 2n, 2n ** 53n - 2n, 2n ** 63n - 3n]) {
      await Promise.all(t.admin.map((r) => r.set(counter, start.toString())));
      for (let i = 1n; i <= 2n; i++) {
        const lease = await redlock.acquire(resource, 5_000);
        expect(lease.token).toBe(start + i);
        expect(await counterOn(t.admin[0] as Redis, resource)).toBe(start + i);
        seen.push(lease.token);
        await lease.release();
        await drained(t.clients);
      }
    }
    expect(seen).toEqual([2n ** 52n - 1n, 2n ** 52n, 2n ** 53n - 1n, 2n ** 53n, 2n ** 63n - 2n, 2n ** 63n - 1n]);
  });

  it("accepts a resource of exactly 512 characters", async () => {
    const lease = await redlock.acquire("r".repeat(512), 1_000);
    expect(lease.resource).toHaveLength(512);
    await lease.release();
  });

  it("acquire sets the lease value with the TTL on every node and hands out the counter as a bigint token", async () => {
    const resource = "basic/acquire";
    const before = Date.now();
    const lease = await redlock.acquire(resource, 5_000);
    try {
      await drained(t.clients);
      expect(lease.resource).toBe(resource);
      expect(typeof lease.token).toBe("bigint");
      expect(lease.token).toBe(1n);
      expect(await countersOn(t.admin, resource)).toEqual([1n, 1n, 1n, 1n, 1n]);
      expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(5).fill(lease.value));
      for (const pttl of await pttls(t.admin, resource)) expect(pttl).toBeGreaterThan(4_000);
      // validity = TTL − elapsed − drift (1 % + 2 ms): just under the TTL, never above it.
      expect(lease.validUntil).toBeGreaterThan(before + 4_000);
      expect(lease.validUntil).toBeLessThanOrEqual(Date.now() + 5_000 - 52);
      expect(lease.remainingMs).toBeGreaterThan(4_000);
      expect(lease.signal.aborted).toBe(false);
    } finally {
      await lease.release();
    }
  });

  it("a second acquirer is refused while the lease is held, with 'held' from every node, and gets a larger token after release", async () => {
    const resource = "basic/exclusive";
    const otherClients = await t.moreClients();
    const other = new Redlock(otherClients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    const first = await redlock.acquire(resource, 5_000);
    await drained(t.clients);
    const refused = await other.acquire(resource, 5_000).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LockNotAcquiredError);
    const error = refused as LockNotAcquiredError;
    expect(error.resource).toBe(resource);
    expect(error.attempts).toBe(1);
    // The tally stops as soon as 3 refused; the rest may be reported as not waited for.
    const held = error.nodes.filter((n) => n.reason === "held").map((n) => n.node);
    expect(held.length).toBeGreaterThanOrEqual(3);
    expect(error.nodes.every((n) => n.reason === "held" || n.reason === "unanswered")).toBe(true);
    expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(5).fill(first.value));

    await first.release();
    const second = await other.acquire(resource, 5_000);
    await drained(otherClients);
    expect(second.token).toBeGreaterThan(first.token);
    expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(5).fill(second.value));
    await second.release();
  });

  it("counters are per resource", async () => {
    const a1 = await redlock.acquire("per-resource/a", 1_000);
    await a1.release();
    const a2 = await redlock.acquire("per-resource/a", 1_000);
    await a2.release();
    const b = await redlock.acquire("per-resource/b", 1_000);
    await b.release();
    expect([a1.token, a2.token, b.token]).toEqual([1n, 2n, 1n]);
  });

  it("extend() lengthens the key's PTTL on every node and moves validUntil", async () => {
    const resource = "basic/extend";
    const lease = await redlock.acquire(resource, 1_000);
    try {
      await drained(t.clients);
      for (const pttl of await pttls(t.admin, resource)) expect(pttl).toBeLessThanOrEqual(1_000);
      const oldValidUntil = lease.validUntil;
      await lease.extend(20_000);
      await drained(t.clients);
      for (const pttl of await pttls(t.admin, resource)) {
        expect(pttl).toBeGreaterThan(19_000);
        expect(pttl).toBeLessThanOrEqual(20_000);
      }
      expect(lease.validUntil).toBeGreaterThan(oldValidUntil + 18_000);
      expect(lease.remainingMs).toBeGreaterThan(19_000);
      expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(5).fill(lease.value));
      await expect(lease.extend(0)).rejects.toThrow(InvalidArgumentError);
      await expect(lease.extend(1.5)).rejects.toThrow(InvalidArgumentError);
    } finally {
      await lease.release();
    }
  });

  it("release() removes the key everywhere, is idempotent, and ends the lease", async () => {
    const resource = "basic/release";
    const lease = await redlock.acquire(resource, 5_000);
    const signal = lease.signal;
    await lease.release();
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(5).fill(null));
    await lease.release();
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(5).fill(null));
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(LeaseLostError);
    expect((signal.reason as LeaseLostError).kind).toBe("released");
    expect(lease.remainingMs).toBe(0);
    await expect(lease.extend(5_000)).rejects.toMatchObject({ name: "LeaseLostError", kind: "released" });
  });

  it("release() never deletes another holder's key", async () => {
    const resource = "basic/foreign";
    const lease = await redlock.acquire(resource, 5_000);
    await drained(t.clients);
    for (const redis of t.admin) await holdAs(redis, resource, "someone-else", 5_000);
    await lease.release();
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(5).fill("someone-else"));
    for (const redis of t.admin) await redis.del(resourceKeys(resource).lease);
  });

  it("extend() fails with quorum-lost once a majority no longer holds this lease's value, and does not touch the other value", async () => {
    const resource = "basic/extend-foreign";
    const lease = await redlock.acquire(resource, 5_000);
    await drained(t.clients);
    for (const redis of t.admin.slice(0, 3)) await holdAs(redis, resource, "someone-else", 5_000);
    const error = await lease.extend(30_000).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseLostError);
    expect((error as LeaseLostError).kind).toBe("quorum-lost");
    expect((error as LeaseLostError).nodes.map((n) => [n.node, n.reason])).toEqual([
      [0, "not-held"],
      [1, "not-held"],
      [2, "not-held"],
    ]);
    expect(lease.signal.aborted).toBe(true);
    for (const pttl of (await pttls(t.admin, resource)).slice(0, 3)) expect(pttl).toBeLessThanOrEqual(5_000);
    expect(await leaseValuesOn(t.admin, resource)).toEqual(["someone-else", "someone-else", "someone-else", lease.value, lease.value]);
    await lease.release();
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual(["someone-else", "someone-else", "someone-else", null, null]);
  });

  it("a lease that is not extended aborts its signal with kind 'expired' when its validity ends", async () => {
    const resource = "basic/expiry";
    const lease = await redlock.acquire(resource, 500);
    const grantedAt = performance.now();
    const validity = lease.remainingMs;
    expect(validity).toBeGreaterThan(0);
    expect(validity).toBeLessThan(500 - 5); // the drift allowance: 1 % + 2 ms
    const reason = await new Promise<unknown>((resolve) =>
      lease.signal.addEventListener("abort", () => resolve(lease.signal.reason), { once: true }),
    );
    const abortedAfter = performance.now() - grantedAt;
    expect(reason).toBeInstanceOf(LeaseLostError);
    expect((reason as LeaseLostError).kind).toBe("expired");
    expect((reason as LeaseLostError).token).toBe(lease.token);
    expect(abortedAfter).toBeGreaterThanOrEqual(validity - 2);
    expect(abortedAfter).toBeLessThan(validity + 1_000);
    expect(lease.remainingMs).toBe(0);
    await expect(lease.extend(1_000)).rejects.toMatchObject({ kind: "expired" });
    await lease.release();
  });

  it("using() keeps extending a lease past its TTL; the token stays the same and the key never expires", async () => {
    const resource = "basic/using";
    const ttl = 800;
    const samples: number[] = [];
    let seen: { token: bigint; aborted: boolean } | undefined;
    const result = await redlock.using(resource, ttl, async (lease) => {
      await drained(t.clients);
      const start = performance.now();
      while (performance.now() - start < 2.5 * ttl) {
        samples.push(...(await pttls(t.admin, resource)));
        expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(5).fill(lease.value));
        await sleep(50);
      }
      seen = { token: lease.token, aborted: lease.signal.aborted };
      expect(await countersOn(t.admin, resource)).toEqual(Array(5).fill(lease.token));
      return "done";
    });
    expect(result).toBe("done");
    await drained(t.clients);
    expect(seen).toEqual({ token: 1n, aborted: false });
    expect(samples.length).toBeGreaterThan(5 * 15);
    for (const pttl of samples) expect(pttl).toBeGreaterThan(0);
    expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(5).fill(null));
    expect(await counterOn(t.admin[0]!, resource)).toBe(1n);
  });

  it("using() releases the lease and rethrows when the routine throws", async () => {
    const resource = "basic/using-throws";
    let signal: AbortSignal | undefined;
    await expect(
      redlock.using(resource, 5_000, (lease) => {
        signal = lease.signal;
        return Promise.reject(new Error("routine failed"));
      }),
    ).rejects.toThrow("routine failed");
    expect(signal?.aborted).toBe(true);
    expect((signal?.reason as LeaseLostError).kind).toBe("released");
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(5).fill(null));
  });
});

describe("Redlock over a single node", () => {
  let t: TestNodes;
  beforeAll(async () => {
    t = await startTestNodes(1);
  });
  afterAll(async () => {
    await t?.stop();
  });

  it("hands out tokens 1, 2, 3, … and is exclusive", async () => {
    const redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    const other = new Redlock(await t.moreClients(), { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    expect(redlock.quorum).toBe(1);
    const tokens: bigint[] = [];
    for (let i = 0; i < 20; i++) {
      const lease = await (i % 2 === 0 ? redlock : other).acquire("single", 5_000);
      tokens.push(lease.token);
      const refused = await (i % 2 === 0 ? other : redlock).acquire("single", 5_000).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(LockNotAcquiredError);
      expect((refused as LockNotAcquiredError).nodes).toEqual([{ node: 0, reason: "held" }]);
      expect(await leaseValuesOn(t.admin, "single")).toEqual([lease.value]);
      await lease.release();
    }
    expect(tokens).toEqual(Array.from({ length: 20 }, (_, i) => BigInt(i + 1)));
    expect(await counterOn(t.admin[0]!, "single")).toBe(20n);
  });
});
