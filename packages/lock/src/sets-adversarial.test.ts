import { MAX_TOKEN } from "@fenced/fence";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mulberry32 } from "@fenced/servers/random";
import { LeaseLostError } from "./errors.js";
import { resourceKeys } from "./keys.js";
import { Redlock } from "./redlock.js";
import { SCRIPTS } from "./scripts.js";
import { leaseKeysOn } from "./sets-test-support.js";
import { countersOn, drained, holdAs, loadScripts, startTestNodes, type TestNodes } from "./test-support.js";

/**
 * Inputs a set's scripts and its held form were not written for, on real nodes: counters in every
 * state a node could hold (negative, at or past the ceiling, not a decimal, another type, around the
 * integer-reply limit) at every position of a set, a node that holds only part of a set when it is
 * published to, and extend/release of a held lease whose `fences` are not the lease's own set. What
 * is pinned: ACQUIRE leaves nothing behind when it does not grant, PUBLISH moves only the resources
 * whose key holds the value, and a crafted set never touches a key that does not hold the value.
 */

const VALUE = "00000000000000000000000000000000";
const OTHER = "ffffffffffffffffffffffffffffffff";

/** Everything a node holds under a set's keys, read in one script (one instant): type, value and whether it has a TTL. */
const READ_STATE = `
local out = {}
for i = 1, #KEYS do
  local t = redis.call('TYPE', KEYS[i])['ok']
  local v = false
  if t == 'string' then v = redis.call('GET', KEYS[i]) elseif t == 'hash' then v = table.concat(redis.call('HGETALL', KEYS[i]), ',') end
  out[i] = {t, v or false, redis.call('PTTL', KEYS[i]) > 0 and 1 or 0}
end
return out
`;

type KeyState = [string, string | null, number];

/** A counter absent and one at "0" read alike everywhere (ACQUIRE's INCR, PUBLISH, the refusal's GET): compared as one state. */
function normalised(state: KeyState[], keys: readonly string[]): KeyState[] {
  return state.map((s, i) => (keys[i]?.endsWith(":token") === true && s[0] === "string" && s[1] === "0" ? ["none", null, 0] : s));
}

async function stateOf(redis: Redis, keys: readonly string[]): Promise<KeyState[]> {
  return normalised((await redis.eval(READ_STATE, keys.length, ...keys)) as KeyState[], keys);
}

const keysOf = (resources: readonly string[]): string[] => resources.flatMap((r) => [resourceKeys(r).lease, resourceKeys(r).counter]);

/** Counter states that INCR takes (absent, or an integer in its one spelling below 2^63 - 1), around the places a reply changes form. */
const GOOD: readonly (string | undefined)[] = [
  undefined,
  "0",
  "41",
  String(2 ** 52 - 1),
  String(2 ** 52),
  "9007199254740993",
  (MAX_TOKEN - 1n).toString(),
];
/** Counter states ACQUIRE must refuse (a token's ceiling) or error on (not a token), each leaving the node as it was. */
const BAD: readonly { readonly state: string | { hash: string }; readonly answer: "refused" | "error" }[] = [
  { state: MAX_TOKEN.toString(), answer: "refused" },
  { state: "99999999999999999999", answer: "refused" },
  { state: "-1", answer: "error" }, // INCR gives 0: advanced, and must be taken back
  { state: "-3", answer: "error" },
  { state: "-0", answer: "error" },
  { state: "007", answer: "error" },
  { state: " 5", answer: "error" },
  { state: "1e3", answer: "error" },
  { state: "abc", answer: "error" },
  { state: { hash: "field" }, answer: "error" },
];

describe("a set's scripts and held form, given what they were not written for (real nodes)", () => {
  let t: TestNodes;

  beforeAll(async () => {
    t = await startTestNodes(3);
    await Promise.all(t.admin.map(loadScripts));
  });
  afterAll(async () => {
    await t?.stop();
  });

  it("ACQUIRE: a counter ACQUIRE cannot advance, at any position of a set of 1 to 4, leaves every key of the node as it was", async () => {
    const redis = t.admin[0] as Redis;
    const random = mulberry32(20261201);
    const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)] as T;
    let refused = 0;
    let errors = 0;
    for (let round = 0; round < 400; round++) {
      const size = 1 + Math.floor(random() * 4);
      const set = Array.from({ length: size }, (_, i) => `undo/${round}/${i}`);
      const keys = keysOf(set);
      const at = Math.floor(random() * size);
      const bad = pick(BAD);
      // A second bad counter after the first, sometimes: the first failure must be the one answered, and undo everything before it.
      const second = random() < 0.3 && at + 1 < size ? at + 1 + Math.floor(random() * (size - at - 1)) : -1;
      const secondBad = pick(BAD);
      for (let i = 0; i < size; i++) {
        const counter = resourceKeys(set[i] as string).counter;
        const state = i === at ? bad.state : i === second ? secondBad.state : pick(GOOD);
        if (state === undefined) continue;
        if (typeof state === "string") await redis.set(counter, state);
        else await redis.hset(counter, state.hash, "1");
      }
      const before = await stateOf(redis, keys);
      const reply = await redis.evalsha(SCRIPTS.acquire.sha, keys.length, ...keys, VALUE, 10_000).catch((e: unknown) => e);
      const label = `round ${round}: set of ${size}, ${JSON.stringify(bad.state)} at ${at}${second >= 0 ? `, ${JSON.stringify(secondBad.state)} at ${second}` : ""}`;
      // An error when any counter of the set is not a token (the refusal reads every counter back), else a refusal with the counters.
      const error = bad.answer === "error" || (second >= 0 && secondBad.answer === "error");
      if (error) expect(reply, label).toBeInstanceOf(Error);
      else expect(Array.isArray(reply) && reply[0] === 0 && reply.length === size + 1, `${label}: ${String(reply)}`).toBe(true);
      if (reply instanceof Error) errors++;
      else refused++;
      expect(await stateOf(redis, keys), label).toEqual(before);
      await redis.del(...keys);
    }
    // Both kinds of answer were exercised.
    expect(refused).toBeGreaterThan(50);
    expect(errors).toBeGreaterThan(50);
  });

  it("ACQUIRE: with every counter a token below the ceiling, every lease key is taken and every counter advanced by exactly one", async () => {
    const redis = t.admin[0] as Redis;
    const random = mulberry32(7);
    for (let round = 0; round < 100; round++) {
      const size = 1 + Math.floor(random() * 4);
      const set = Array.from({ length: size }, (_, i) => `grant/${round}/${i}`);
      const keys = keysOf(set);
      const states = set.map(() => GOOD[Math.floor(random() * GOOD.length)]);
      for (const [i, state] of states.entries()) if (state !== undefined) await redis.set(resourceKeys(set[i] as string).counter, state);
      const reply = (await redis.evalsha(SCRIPTS.acquire.sha, keys.length, ...keys, VALUE, 10_000)) as unknown[];
      const expected = states.map((s) => BigInt(s ?? "0") + 1n);
      expect(reply[0]).toBe(1);
      expect(reply.slice(1).map((c) => BigInt(c as number | string))).toEqual(expected);
      expect(await leaseKeysOn([redis], set)).toEqual([set.map(() => VALUE)]);
      expect(await Promise.all(set.map((r) => redis.get(resourceKeys(r).counter)))).toEqual(expected.map(String));
      await redis.del(...keys);
    }
  });

  it("PUBLISH of a set on a node holding part of it moves only the resources whose key holds the value (-1 for the others)", async () => {
    const redis = t.admin[0] as Redis;
    const [a, b, c] = ["part/a", "part/b", "part/c"];
    await holdAs(redis, a, VALUE, 10_000);
    await holdAs(redis, b, OTHER, 10_000); // taken by another lease since
    // c: no key at all (expired)
    await redis.set(resourceKeys(a).counter, "3");
    await redis.set(resourceKeys(b).counter, "3");
    await redis.set(resourceKeys(c).counter, "3");
    const keys = keysOf([a, b, c]);
    const before = await stateOf(redis, keys);
    expect(await redis.evalsha(SCRIPTS.publish.sha, keys.length, ...keys, VALUE, "7", "7", "7")).toEqual([1, -1, -1]);
    const after = await stateOf(redis, keys);
    expect(after[1]).toEqual(["string", "7", 0]);
    expect([after[0], after[2], after[3], after[4], after[5]]).toEqual([before[0], before[2], before[3], before[4], before[5]]);
    // A token past the ceiling anywhere in the set: nothing is written, not even for the resources before it.
    await expect(redis.evalsha(SCRIPTS.publish.sha, keys.length, ...keys, VALUE, "9", (MAX_TOKEN + 1n).toString(), "9")).rejects.toThrow(
      /publish wants a token/,
    );
    expect(await stateOf(redis, keys)).toEqual(after);
    await redis.del(...keys);
  });

  it("extend/release of a held set whose fences are not the lease's: never a key that does not hold the value, never a key created", async () => {
    const redlock = new Redlock(t.clients, { retryCount: 0 });
    const [a, b, c, free] = ["crafted/a", "crafted/b", "crafted/c", "crafted/free"];
    const lease = await redlock.acquire([a, b], 10_000);
    const other = await redlock.acquire(c, 10_000);
    const ttls = async (resource: string): Promise<number[]> =>
      Promise.all(t.admin.map((redis) => redis.pttl(resourceKeys(resource).lease)));
    await drained(t.clients);
    const fences = lease.fences.map(({ resource, token }) => ({ resource, token }));
    const tokenOf = (r: string): bigint => (lease.fences.find((f) => f.resource === r) as { token: bigint }).token;

    // A set naming another lease's resource beside its own: EXTEND is all or nothing, so neither is extended.
    const cBefore = await ttls(c);
    await expect(
      redlock.extend(
        {
          fences: [
            { resource: a, token: tokenOf(a) },
            { resource: c, token: other.token },
          ],
          value: lease.value,
        },
        60_000,
      ),
    ).rejects.toBeInstanceOf(LeaseLostError);
    await drained(t.clients);
    for (const ttl of await ttls(a)) expect(ttl).toBeLessThanOrEqual(10_000);
    for (const [i, ttl] of (await ttls(c)).entries()) expect(ttl).toBeLessThanOrEqual(cBefore[i] as number);

    // A free resource beside its own: not created by extend, nor by release.
    await expect(redlock.extend({ fences: [...fences, { resource: free, token: 1n }], value: lease.value }, 60_000)).rejects.toBeInstanceOf(
      LeaseLostError,
    );
    await redlock.release({
      fences: [
        { resource: free, token: 1n },
        { resource: c, token: other.token },
      ],
      value: lease.value,
    });
    await drained(t.clients);
    expect(await leaseKeysOn(t.admin, [a, b, c, free])).toEqual(Array(3).fill([lease.value, lease.value, other.value, null]));
    expect(await countersOn(t.admin, free)).toEqual([0n, 0n, 0n]);

    // A subset: the holder can shrink its own lease (extend b alone, release a alone) — nothing it could not do by releasing the
    // whole lease and taking b again, and the resource it gives up is taken next with a larger token.
    const b2 = await redlock.extend({ fences: [{ resource: b, token: tokenOf(b) }], value: lease.value }, 5_000);
    expect(b2.resources).toEqual([b]);
    await redlock.release({ fences: [{ resource: a, token: tokenOf(a) }], value: lease.value });
    await drained(t.clients);
    expect(await leaseKeysOn(t.admin, [a, b, c])).toEqual(Array(3).fill([null, lease.value, other.value]));
    const next = await redlock.acquire(a, 10_000);
    expect(next.token).toBeGreaterThan(tokenOf(a));
    // The set's own Lease no longer holds its set anywhere: its extension fails, and touches neither a (another lease's now) nor b.
    await expect(lease.extend(10_000)).rejects.toBeInstanceOf(LeaseLostError);
    await drained(t.clients);
    expect(await leaseKeysOn(t.admin, [a, b])).toEqual(Array(3).fill([next.value, lease.value]));
    await lease.release();
    await drained(t.clients);
    expect(await leaseKeysOn(t.admin, [a, b, c])).toEqual(Array(3).fill([next.value, null, other.value]));
    await Promise.all([next.release(), other.release(), b2.release()]);
  });
});
