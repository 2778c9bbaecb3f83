import { MAX_TOKEN } from "@fenced/fence";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { redisErrorCode } from "./client.js";
import { TokenSpaceExhaustedError } from "./errors.js";
import { resourceKeys } from "./keys.js";
import { Redlock } from "./redlock.js";
import { SCRIPTS } from "./scripts.js";
import { countersOn, drained, holdAs, leaseValuesOn, loadScripts, startTestNodes, type TestNodes } from "./test-support.js";

/**
 * PROTOCOL.md, "The counter ceiling": a token is at most 2^63 − 1 (MAX_TOKEN), the largest value a
 * store compares. No script may push a counter past it or leave a lease key behind on the way, and
 * a resource whose counters reached it fails with TokenSpaceExhaustedError instead of retrying.
 */
const MAX = MAX_TOKEN;
const VALUE = "0123456789abcdef0123456789abcdef";

/** EVALSHA calls served, summed over the nodes (the scripts are preloaded, so no EVAL fallback). */
async function scriptCalls(admin: readonly Redis[]): Promise<number> {
  let total = 0;
  for (const redis of admin) {
    const match = /^cmdstat_evalsha:calls=(\d+)/m.exec(await redis.info("commandstats"));
    total += Number(match?.[1] ?? 0);
  }
  return total;
}

async function setCounters(admin: readonly Redis[], resource: string, values: readonly (bigint | string)[]): Promise<void> {
  await Promise.all(admin.map((redis, i) => redis.set(resourceKeys(resource).counter, String(values[i]))));
}

describe("the counter ceiling at 2^63 - 1", () => {
  let t: TestNodes;
  let redlock: Redlock;
  let admin: Redis;

  beforeAll(async () => {
    t = await startTestNodes(5);
    await Promise.all(t.admin.map(loadScripts));
    // Default retries: exhaustion must not be retried.
    redlock = new Redlock(t.clients);
    admin = t.admin[0]!;
  });
  afterAll(async () => {
    await t?.stop();
  });

  it("counters at 2^63 - 1 on every node: acquire rejects with TokenSpaceExhaustedError after one attempt, leaving no lease key anywhere", async () => {
    const resource = "ceiling/all";
    await setCounters(t.admin, resource, Array(5).fill(MAX));
    const before = await scriptCalls(t.admin);
    const error = await redlock.acquire(resource, 5_000).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TokenSpaceExhaustedError);
    expect((error as TokenSpaceExhaustedError).resource).toBe(resource);
    expect((error as TokenSpaceExhaustedError).highest).toBe(MAX);
    await drained(t.clients);
    // One attempt: 5 acquires, 5 releases, no retry.
    expect((await scriptCalls(t.admin)) - before).toBe(10);
    expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(5).fill(null));
    expect(await countersOn(t.admin, resource)).toEqual(Array(5).fill(MAX));
  });

  it("grants at 2^63 - 2 and a refusing node at 2^63 - 1 (the publish path): TokenSpaceExhaustedError, no counter past 2^63 - 1, no key left", async () => {
    const resource = "ceiling/publish";
    // A, B, C grant with MAX-2, MAX-1, MAX-1: no quorum at one value, so the round waits for D and E.
    // D refuses (held) and reports MAX: the candidate would be MAX + 1.
    await setCounters(t.admin, resource, [MAX - 3n, MAX - 2n, MAX - 2n, MAX, MAX - 5n]);
    for (const redis of t.admin.slice(3)) await holdAs(redis, resource, "another-holder", 10_000);
    const error = await redlock.acquire(resource, 5_000).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TokenSpaceExhaustedError);
    expect((error as TokenSpaceExhaustedError).highest).toBe(MAX);
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual([null, null, null, "another-holder", "another-holder"]);
    expect(await countersOn(t.admin, resource)).toEqual([MAX - 2n, MAX - 1n, MAX - 1n, MAX, MAX - 5n]);
  });

  it("counters just below the ceiling still give exact tokens, up to 2^63 - 1 itself; the next acquire is refused", async () => {
    const resource = "ceiling/last";
    await setCounters(t.admin, resource, Array(5).fill(MAX - 2n));
    const tokens: bigint[] = [];
    for (let i = 0; i < 2; i++) {
      const lease = await redlock.acquire(resource, 5_000);
      tokens.push(lease.token);
      await lease.release();
      await drained(t.clients);
    }
    expect(tokens).toEqual([MAX - 1n, MAX]);
    expect(await countersOn(t.admin, resource)).toEqual(Array(5).fill(MAX));
    await expect(redlock.acquire(resource, 5_000)).rejects.toBeInstanceOf(TokenSpaceExhaustedError);
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(5).fill(null));
  });

  it("publish may raise counters to exactly 2^63 - 1", async () => {
    const resource = "ceiling/publish-exact";
    // A and C grant MAX-1, B grants MAX: the token is MAX, published to A and C.
    await setCounters(t.admin, resource, [MAX - 2n, MAX - 1n, MAX - 2n, MAX - 1n, 0n]);
    for (const redis of t.admin.slice(3)) await holdAs(redis, resource, "another-holder", 10_000);
    const lease = await redlock.acquire(resource, 5_000);
    expect(lease.token).toBe(MAX);
    await drained(t.clients);
    expect(await countersOn(t.admin, resource)).toEqual([MAX, MAX, MAX, MAX - 1n, 0n]);
    await lease.release();
  });

  it("a quorum reaching 2^63 - 1 while a refusing node is already there gets 2^63 - 1", async () => {
    const resource = "ceiling/equal";
    await setCounters(t.admin, resource, [MAX - 1n, MAX - 1n, MAX - 1n, MAX, 0n]);
    for (const redis of t.admin.slice(3)) await holdAs(redis, resource, "another-holder", 10_000);
    const lease = await redlock.acquire(resource, 5_000);
    expect(lease.token).toBe(MAX);
    await lease.release();
  });

  it("the ACQUIRE script refuses a counter at or past the ceiling before setting the lease key", async () => {
    for (const counter of [MAX.toString(), (MAX + 1n).toString(), "99999999999999999999"]) {
      const keys = resourceKeys(`ceiling/script/${counter}`);
      await admin.set(keys.counter, counter);
      const reply = await admin.evalsha(SCRIPTS.acquire.sha, 2, keys.lease, keys.counter, VALUE, 10_000);
      expect(reply, counter).toEqual([0, counter]);
      expect(await admin.exists(keys.lease), counter).toBe(0);
      expect(await admin.get(keys.counter)).toBe(counter);
    }
  });

  it("the ACQUIRE script errors on a counter that is not a token, before setting the lease key", async () => {
    for (const counter of ["abc", "-5", "007", "1.5", ""]) {
      const keys = resourceKeys(`ceiling/malformed/${counter}`);
      await admin.set(keys.counter, counter);
      const error = await admin.evalsha(SCRIPTS.acquire.sha, 2, keys.lease, keys.counter, VALUE, 10_000).catch((e: unknown) => e);
      expect(redisErrorCode(error), JSON.stringify(counter)).toBe("ERR");
      expect(await admin.exists(keys.lease), JSON.stringify(counter)).toBe(0);
      expect(await admin.get(keys.counter)).toBe(counter);
    }
  });

  it("the ACQUIRE script errors on a counter key of another type, and leaves no lease key", async () => {
    const keys = resourceKeys("ceiling/malformed/hash");
    await admin.hset(keys.counter, "token", "1");
    const error = await admin.evalsha(SCRIPTS.acquire.sha, 2, keys.lease, keys.counter, VALUE, 10_000).catch((e: unknown) => e);
    expect(redisErrorCode(error)).toBe("ERR");
    expect(await admin.exists(keys.lease)).toBe(0);
    expect(await admin.hgetall(keys.counter)).toEqual({ token: "1" });
  });

  it("a minority of nodes with malformed counters: the lease is granted by the rest, and those nodes hold no key", async () => {
    const resource = "ceiling/malformed-minority";
    await setCounters(t.admin, resource, ["0", "0", "0", "-5", "abc"]);
    const lease = await redlock.acquire(resource, 5_000);
    expect(lease.token).toBe(1n);
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual([lease.value, lease.value, lease.value, null, null]);
    await lease.release();
  });

  it("the PUBLISH script refuses a token above 2^63 - 1 and accepts 2^63 - 1 itself", async () => {
    const keys = resourceKeys("ceiling/publish-script");
    await admin.set(keys.lease, VALUE, "PX", 10_000);
    await admin.set(keys.counter, (MAX - 5n).toString());
    for (const wanted of [(MAX + 1n).toString(), "99999999999999999999", "-1", "abc"]) {
      const error = await admin.evalsha(SCRIPTS.publish.sha, 2, keys.lease, keys.counter, VALUE, wanted).catch((e: unknown) => e);
      expect(redisErrorCode(error), wanted).toBe("ERR");
      expect(await admin.get(keys.counter)).toBe((MAX - 5n).toString());
    }
    expect(await admin.evalsha(SCRIPTS.publish.sha, 2, keys.lease, keys.counter, VALUE, MAX.toString())).toEqual([1]);
    expect(await admin.get(keys.counter)).toBe(MAX.toString());
  });
});
