import { MAX_RESOURCES, MAX_TOKEN } from "@fenced/fence";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LockNotAcquiredError, TokenSpaceExhaustedError } from "./errors.js";
import { resourceKeys } from "./keys.js";
import { Redlock } from "./redlock.js";
import { SCRIPTS } from "./scripts.js";
import { leaseKeysOn, setCounters } from "./sets-test-support.js";
import { countersOn, drained, holdAs, leaseValuesOn, loadScripts, startTestNodes, type TestNodes } from "./test-support.js";

/** PROTOCOL.md, "Sets: several resources in one lease": one lease, all of the set or none, a token per resource. */

/** Calls of every command except INFO (which the probing itself issues), summed over the nodes. */
async function commandsServed(admin: readonly Redis[]): Promise<number> {
  let total = 0;
  for (const redis of admin) {
    const stats = await redis.info("commandstats");
    for (const [, name, calls] of stats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) if (name !== "info") total += Number(calls);
  }
  return total;
}

const VALUE = "0123456789abcdef0123456789abcdef";

describe("a lease of several resources over 5 nodes", () => {
  let t: TestNodes;
  let redlock: Redlock;

  beforeAll(async () => {
    t = await startTestNodes(5);
    // Preloaded, so that drained() is exact.
    await Promise.all(t.admin.map(loadScripts));
    redlock = new Redlock(t.clients, { retryCount: 0 });
  });
  afterAll(async () => {
    await t?.stop();
  });

  it("refuses a set that is empty, repeats a resource, holds an invalid one or more than MAX_RESOURCES, before sending anything", async () => {
    const before = await commandsServed(t.admin);
    const invalid = (argument: string): Error => expect.objectContaining({ name: "InvalidArgumentError", argument }) as Error;
    const routine = (): Promise<void> => Promise.reject(new Error("must not run"));
    const bad: [unknown, string][] = [
      [[], "resources"],
      [["a", "b", "a"], "resources[2]"],
      [["a", "a"], "resources[1]"],
      [["a", ""], "resources[1]"],
      [["a", "b", "line\nbreak"], "resources[2]"],
      [["lone\ud800", "b"], "resources[0]"],
      [["a", 7], "resources[1]"],
      [["a", null], "resources[1]"],
      [["r".repeat(513)], "resources[0]"],
      [Array.from({ length: MAX_RESOURCES + 1 }, (_, i) => `many/${i}`), "resources"],
    ];
    for (const [resources, argument] of bad) {
      await expect(redlock.acquire(resources as string[], 1_000), argument).rejects.toThrow(invalid(argument));
      await expect(redlock.using(resources as string[], 1_000, routine), argument).rejects.toThrow(invalid(argument));
    }
    // The string form names `resource`.
    await expect(redlock.acquire("", 1_000)).rejects.toThrow(invalid("resource"));
    expect(await commandsServed(t.admin)).toBe(before);
    expect(await Promise.all(t.admin.map((r) => r.dbsize()))).toEqual([0, 0, 0, 0, 0]);

    // MAX_RESOURCES itself is a set a lease can hold.
    const most = Array.from({ length: MAX_RESOURCES }, (_, i) => `most/${i}`);
    const lease = await redlock.acquire(most, 5_000);
    expect(lease.fences.map((f) => [f.resource, f.token])).toEqual(most.map((r) => [r, 1n]));
    await lease.release();
    await drained(t.clients);
    for (const values of await leaseKeysOn(t.admin, most)) expect(values).toEqual(Array(MAX_RESOURCES).fill(null));
  });

  it("a one-element array is the string form: the same keys, the same counter, a lease that looks the same", async () => {
    const resource = "one/element";
    const tokens: bigint[] = [];
    for (const form of [resource, [resource], resource, [resource]]) {
      const lease = await redlock.acquire(form, 5_000);
      await drained(t.clients);
      expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(5).fill(lease.value));
      expect(lease.resource).toBe(resource);
      expect(lease.resources).toEqual([resource]);
      expect(lease.fences).toEqual([{ resource, token: lease.token, holder: lease.holder }]);
      // No `fences` in what a lease of one resource shows, whichever form asked for it.
      expect(Object.keys(JSON.parse(JSON.stringify(lease)) as object).sort()).toEqual([
        "holder",
        "lost",
        "resource",
        "token",
        "validUntil",
      ]);
      tokens.push(lease.token);
      // Held in one form, refused in the other, with the one-resource message.
      const other = typeof form === "string" ? [resource] : resource;
      const refused = await new Redlock(t.clients, { retryCount: 0 }).acquire(other, 5_000).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(LockNotAcquiredError);
      expect((refused as LockNotAcquiredError).resources).toEqual([resource]);
      expect((refused as LockNotAcquiredError).message).toMatch(/^could not acquire "one\/element" after 1 attempt\(s\)/);
      await lease.release();
    }
    expect(tokens).toEqual([1n, 2n, 3n, 4n]);
    expect(await countersOn(t.admin, resource)).toEqual(Array(5).fill(4n));
  });

  it("holds every resource on every node under one value, with a token per resource in the order asked", async () => {
    const [a, b, c] = ["set/a", "set/b", "set/c"];
    // b has been locked before: each resource counts on its own.
    for (let i = 0; i < 2; i++) await (await redlock.acquire(b, 1_000)).release();
    const lease = await redlock.acquire([c, a, b], 5_000);
    await drained(t.clients);
    expect(lease.resources).toEqual([c, a, b]);
    expect(lease.fences).toEqual([
      { resource: c, token: 1n, holder: lease.holder },
      { resource: a, token: 1n, holder: lease.holder },
      { resource: b, token: 3n, holder: lease.holder },
    ]);
    expect([lease.resource, lease.token]).toEqual([c, 1n]);
    expect(Object.isFrozen(lease.fences) && lease.fences.every((f) => Object.isFrozen(f))).toBe(true);
    expect(await leaseKeysOn(t.admin, [a, b, c])).toEqual(Array(5).fill([lease.value, lease.value, lease.value]));
    for (const redis of t.admin) for (const r of [a, b, c]) expect(await redis.pttl(resourceKeys(r).lease)).toBeGreaterThan(4_000);
    expect(await countersOn(t.admin, b)).toEqual(Array(5).fill(3n));

    // Any resource of the set is held: alone, in another order, or in an overlapping set.
    const otherClients = await t.moreClients();
    const other = new Redlock(otherClients, { retryCount: 0 });
    for (const wanted of [a, [b, a], ["set/d", c], ["set/d", "set/e", b]]) {
      const error = await other.acquire(wanted, 5_000).catch((e: unknown) => e);
      expect(error, JSON.stringify(wanted)).toBeInstanceOf(LockNotAcquiredError);
      expect((error as LockNotAcquiredError).resources).toEqual(typeof wanted === "string" ? [wanted] : wanted);
    }
    await drained(otherClients);
    // The refused sets took nothing: d and e are free on every node, the set still holds all of its keys.
    expect(await leaseKeysOn(t.admin, ["set/d", "set/e"])).toEqual(Array(5).fill([null, null]));
    expect(await leaseKeysOn(t.admin, [a, b, c])).toEqual(Array(5).fill([lease.value, lease.value, lease.value]));
    await lease.release();
    await drained(t.clients);
    expect(await leaseKeysOn(t.admin, [a, b, c])).toEqual(Array(5).fill([null, null, null]));
  });

  it("LockNotAcquiredError names every resource of the set, and nothing is left held", async () => {
    const [a, b] = ["named/a", "named/b"];
    for (const redis of t.admin.slice(0, 3)) await holdAs(redis, b, "another-holder", 10_000);
    const error = await redlock.acquire([a, b], 5_000).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockNotAcquiredError);
    const { resource, resources, message, nodes } = error as LockNotAcquiredError;
    expect([resource, resources]).toEqual([a, [a, b]]);
    expect(message).toMatch(/^could not acquire "named\/a", "named\/b" after 1 attempt\(s\): /);
    expect(nodes.filter((n) => n.reason === "held").map((n) => n.node)).toEqual([0, 1, 2]);
    await drained(t.clients);
    const another = "another-holder";
    expect(await leaseKeysOn(t.admin, [a, b])).toEqual([
      [null, another],
      [null, another],
      [null, another],
      [null, null],
      [null, null],
    ]);
  });

  it("the ACQUIRE script takes nothing on a node where any key of the set is held, and moves no counter", async () => {
    const admin = t.admin[0]!;
    const keysOf = (resources: readonly string[]): string[] => resources.flatMap((r) => [resourceKeys(r).lease, resourceKeys(r).counter]);
    const set = ["script/a", "script/b", "script/c"];
    await setCounters([admin], "script/a", ["4"]);
    for (const held of set) {
      await holdAs(admin, held, "another-holder", 10_000);
      const reply = await admin.evalsha(SCRIPTS.acquire.sha, 6, ...keysOf(set), VALUE, 10_000);
      expect(reply, `${held} held`).toEqual([0, "4", "0", "0"]);
      expect(await leaseKeysOn([admin], set)).toEqual([set.map((r) => (r === held ? "another-holder" : null))]);
      await admin.del(resourceKeys(held).lease);
    }
    expect(await countersOn([admin], "script/a")).toEqual([4n]);
    expect(await countersOn([admin], "script/b")).toEqual([0n]);
    // All free: granted, every counter advanced once.
    expect(await admin.evalsha(SCRIPTS.acquire.sha, 6, ...keysOf(set), VALUE, 10_000)).toEqual([1, 5, 1, 1]);
    expect(await leaseKeysOn([admin], set)).toEqual([[VALUE, VALUE, VALUE]]);
    await admin.del(...set.map((r) => resourceKeys(r).lease));
  });

  it("each resource is counted by its own counters: a node at b's token for a, but behind on b, is published to for b", async () => {
    // What failed attempts leave behind: a's last attempts reached A, B and C only (9, D and E at 7);
    // b's were granted by D and E only (9) and refused by A, B and C (8, 8, 7). No quorum of b's
    // grants can agree on one counter, so the round hears every node.
    const [a, b] = ["count/a", "count/b"];
    await setCounters(t.admin, a, [9n, 9n, 9n, 7n, 7n]);
    await setCounters(t.admin, b, [8n, 8n, 7n, 9n, 9n]);
    const lease = await redlock.acquire([a, b], 5_000);
    // a: INCR gives 10, 10, 10, 8, 8 — token 10, counted on A, B, C. b: INCR gives 9, 9, 8, 10, 10 —
    // token 10, counted on D and E only: A, B and C are at 10 for a, not for b, and are published to.
    expect(lease.fences.map((f) => f.token)).toEqual([10n, 10n]);
    await drained(t.clients);
    expect(await countersOn(t.admin, a)).toEqual([10n, 10n, 10n, 8n, 8n]);
    expect(await countersOn(t.admin, b)).toEqual([10n, 10n, 10n, 10n, 10n]);
    await lease.release();

    // So b's next token is above 10 even from the nodes that were behind on it: no token repeats.
    for (const redis of t.admin.slice(3)) await holdAs(redis, b, "another-holder", 10_000);
    const next = await redlock.acquire(b, 5_000);
    expect(next.token).toBe(11n);
    await next.release();
  });

  it("a counter at 2^63 - 1: TokenSpaceExhaustedError naming that resource, nothing held, the other counters not advanced", async () => {
    const [FREE, FULL] = ["exhausted/free", "exhausted/full"];
    for (const order of [
      ["exhausted/free", "exhausted/full"],
      ["exhausted/full", "exhausted/free"],
    ]) {
      const [free, full] = [FREE, FULL];
      await setCounters(t.admin, free, Array(5).fill(41n));
      await setCounters(t.admin, full, Array(5).fill(MAX_TOKEN));
      // Default retries: exhaustion is not retried.
      const error = await new Redlock(t.clients).acquire([...order, "exhausted/third"], 5_000).catch((e: unknown) => e);
      expect(error, order.join()).toBeInstanceOf(TokenSpaceExhaustedError);
      expect((error as TokenSpaceExhaustedError).resource).toBe(full);
      expect((error as TokenSpaceExhaustedError).highest).toBe(MAX_TOKEN);
      await drained(t.clients);
      expect(await leaseKeysOn(t.admin, [free, full, "exhausted/third"])).toEqual(Array(5).fill([null, null, null]));
      expect(await countersOn(t.admin, free)).toEqual(Array(5).fill(41n));
      expect(await countersOn(t.admin, full)).toEqual(Array(5).fill(MAX_TOKEN));
      expect(await countersOn(t.admin, "exhausted/third")).toEqual(Array(5).fill(0n));
    }
    // A resource whose counter the refused call created (its INCR returned 1) is left without one, not at "0".
    const fresh = "exhausted/fresh";
    const refused = await new Redlock(t.clients).acquire([fresh, FULL], 5_000).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(TokenSpaceExhaustedError);
    await drained(t.clients);
    expect(await Promise.all(t.admin.map((redis) => redis.exists(resourceKeys(fresh).counter)))).toEqual([0, 0, 0, 0, 0]);
    // The other resources are not exhausted: they are granted alone, their tokens next in line.
    const lease = await redlock.acquire(["exhausted/third", "exhausted/free"], 5_000);
    expect(lease.fences.map((f) => f.token)).toEqual([1n, 42n]);
    await lease.release();
  });
});
