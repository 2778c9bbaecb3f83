import { setTimeout as sleep } from "node:timers/promises";
import { inspect } from "node:util";
import { checkFence } from "@fenced/fence";
import { checkFences, refuseEndedLease } from "@fenced/fence/internal";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LeaseLostError } from "./errors.js";
import { resourceKeys } from "./keys.js";
import type { LeaseFence } from "./lease.js";
import { Redlock } from "./redlock.js";
import { leaseKeysOn } from "./sets-test-support.js";
import { countersOn, drained, holdAs, loadScripts, startTestNodes, type LockClient, type TestNodes } from "./test-support.js";

/** PROTOCOL.md, "Sets": extend and release cover the set, all of it or none; a lease of a set as its holder and the stores see it. */
describe("a lease of several resources, held", () => {
  let t: TestNodes;
  let redlock: Redlock;
  let otherClients: LockClient[];
  let other: Redlock;

  beforeAll(async () => {
    t = await startTestNodes(3);
    await Promise.all(t.admin.map(loadScripts));
    redlock = new Redlock(t.clients, { retryCount: 0 });
    // Another process: its own connections, nothing shared with the one that acquired.
    otherClients = await t.moreClients();
    other = new Redlock(otherClients, { retryCount: 0 });
  });
  afterAll(async () => {
    await t?.stop();
  });

  const pttls = (resources: readonly string[]): Promise<number[][]> =>
    Promise.all(t.admin.map((redis) => Promise.all(resources.map((r) => redis.pttl(resourceKeys(r).lease)))));
  const both = async (): Promise<void> => {
    await drained(t.clients);
    await drained(otherClients);
  };

  it("extend() keeps every key of the set on every node, with the same tokens", async () => {
    const set = ["extend/a", "extend/b", "extend/c"];
    const lease = await redlock.acquire(set, 1_000);
    const fences = lease.fences;
    await lease.extend(20_000);
    await both();
    for (const node of await pttls(set)) for (const pttl of node) expect(pttl).toBeGreaterThan(19_000);
    expect(await leaseKeysOn(t.admin, set)).toEqual(Array(3).fill(Array(3).fill(lease.value)));
    expect(lease.fences).toEqual(fences);
    expect(lease.remainingMs).toBeGreaterThan(19_000);
    await lease.release();
  });

  it("a node holding only part of the set does not count for extend: with one key gone on a majority the lease is lost, the rest untouched", async () => {
    const [a, b] = ["partial/a", "partial/b"];
    // No node is silent here: a node timeout far above any answer keeps C, which confirms, out of the failures on a busy machine.
    const lease = await new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: 2_000 }).acquire([a, b], 5_000);
    await both();
    // b's key is gone on A and B (expired there, say); a's is still this lease's.
    for (const redis of t.admin.slice(0, 2)) await redis.del(resourceKeys(b).lease);
    const error = await lease.extend(60_000).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseLostError);
    const lost = error as LeaseLostError;
    expect(lost.kind).toBe("quorum-lost");
    expect(lost.nodes).toEqual([
      { node: 0, reason: "not-held" },
      { node: 1, reason: "not-held" },
    ]);
    expect(lost.fences).toEqual([
      { resource: a, token: 1n },
      { resource: b, token: 1n },
    ]);
    expect(lost.message).toBe(
      'lease on "partial/a" (token 1), "partial/b" (token 1) lost: quorum-lost — node 0: not-held; node 1: not-held',
    );
    expect(lease.signal.aborted).toBe(true);
    expect(lease.signal.reason).toBe(error);
    await both();
    // EXTEND extended nothing on A and B (not even a's key there); C, which holds the whole set, was extended.
    const [onA, onB, onC] = await pttls([a, b]);
    expect(onA![0]).toBeLessThanOrEqual(5_000);
    expect(onB![0]).toBeLessThanOrEqual(5_000);
    expect(onC![0]).toBeGreaterThan(50_000);
    expect(onC![1]).toBeGreaterThan(50_000);
    await lease.release();
    await both();
    expect(await leaseKeysOn(t.admin, [a, b])).toEqual(Array(3).fill([null, null]));
  });

  it("release() deletes every key of the set on every node, and never a key holding another lease's value", async () => {
    const [a, b, c] = ["release/a", "release/b", "release/c"];
    const lease = await redlock.acquire([a, b, c], 5_000);
    await both();
    // On A, b has since been taken by someone else (this lease's key there expired).
    await holdAs(t.admin[0]!, b, "someone-else", 10_000);
    await lease.release();
    await both();
    expect(await leaseKeysOn(t.admin, [a, b, c])).toEqual([
      [null, "someone-else", null],
      [null, null, null],
      [null, null, null],
    ]);
    expect(lease.lostReason).toMatchObject({ kind: "released", fences: lease.fences.map(({ resource, token }) => ({ resource, token })) });
  });

  it("redlock.extend({ fences, value, validUntil }) and redlock.release({ fences, value }) from another Redlock", async () => {
    const set = ["held/a", "held/b"];
    const lease = await redlock.acquire(set, 1_000);
    const fences = lease.fences.map(({ resource, token }) => ({ resource, token }));
    // What a process hands on: every resource with its token, and the value. No `resource` or `token` of its own.
    const extended = await other.extend({ fences, value: lease.value, validUntil: lease.validUntil }, 20_000);
    expect(extended.resources).toEqual(set);
    expect(extended.fences).toEqual(lease.fences);
    expect([extended.resource, extended.token, extended.holder]).toEqual([lease.resource, lease.token, lease.holder]);
    expect(extended.remainingMs).toBeGreaterThan(15_000);
    await both();
    for (const node of await pttls(set)) for (const pttl of node) expect(pttl).toBeGreaterThan(15_000);

    // A value the nodes do not hold extends nothing, and releases nothing.
    const forged = { fences, value: "0".repeat(32) };
    await expect(other.extend(forged, 60_000)).rejects.toSatisfy((e) => e instanceof LeaseLostError && e.kind === "quorum-lost");
    await other.release(forged);
    await both();
    expect(await leaseKeysOn(t.admin, set)).toEqual(Array(3).fill([lease.value, lease.value]));

    // A Lease handed in whole is the set too.
    await other.extend(lease, 20_000);
    await other.release({ fences, value: lease.value });
    await both();
    expect(await leaseKeysOn(t.admin, set)).toEqual(Array(3).fill([null, null]));
    await expect(other.extend({ fences, value: lease.value }, 5_000)).rejects.toMatchObject({ kind: "quorum-lost", fences });
  });

  it("a held set that is not one is refused before any I/O, naming the fence at fault", async () => {
    const value = "a".repeat(32);
    const bad: [unknown, string][] = [
      [{ fences: [], value }, "held.fences"],
      [{ fences: "a,b", value }, "held.fences"],
      [{ fences: [{ resource: "a", token: 1n }, null], value }, "held.fences[1]"],
      [
        {
          fences: [
            { resource: "a", token: 1n },
            { resource: "", token: 1n },
          ],
          value,
        },
        "held.fences[1].resource",
      ],
      [
        {
          fences: [
            { resource: "a", token: 1n },
            { resource: "b", token: 1 },
          ],
          value,
        },
        "held.fences[1].token",
      ],
      [
        {
          fences: [
            { resource: "a", token: 1n },
            { resource: "a", token: 2n },
          ],
          value,
        },
        "held.fences[1]",
      ],
      [{ fences: [{ resource: "a", token: 1n }], value: "nope" }, "held.value"],
    ];
    for (const [held, argument] of bad) {
      const expected = expect.objectContaining({ name: "InvalidArgumentError", argument }) as Error;
      await expect(other.extend(held as never, 1_000), argument).rejects.toThrow(expected);
      await expect(other.release(held as never), argument).rejects.toThrow(expected);
    }
  });

  it("toJSON() and inspect() show every fence, never the value; the stores take the fences, not the lease as one fence", async () => {
    const lease = await redlock.acquire(["show/a", "show/b"], 10_000);
    try {
      expect(JSON.parse(JSON.stringify(lease))).toEqual({
        resource: "show/a",
        token: "1",
        fences: [
          { resource: "show/a", token: "1" },
          { resource: "show/b", token: "1" },
        ],
        holder: lease.holder,
        validUntil: lease.validUntil,
        lost: false,
      });
      const shown = inspect(lease, { depth: Infinity });
      expect(shown).toContain("show/b");
      expect(shown).toMatch(/fences/);
      for (const printed of [shown, JSON.stringify(lease), inspect({ nested: lease }, { depth: Infinity, showHidden: true })])
        for (let i = 0; i + 8 <= lease.value.length; i++) expect(printed).not.toContain(lease.value.slice(i, i + 8));
      // What @fenced/fence makes of it: each fence is one resource's, the lease whole is several, never one.
      expect(checkFence(lease.fences[1])).toEqual({ resource: "show/b", token: 1n, holder: lease.holder });
      expect(checkFences(lease).map((f) => f.resource)).toEqual(["show/a", "show/b"]);
      expect(() => checkFence(lease)).toThrow(expect.objectContaining({ name: "InvalidArgumentError", argument: "fence" }) as Error);
    } finally {
      await lease.release();
    }
    expect(JSON.parse(JSON.stringify(lease))).toMatchObject({ lost: true, fences: [{ resource: "show/a" }, { resource: "show/b" }] });
  });

  it("each of lease.fences answers the lease's lostReason, not enumerable: refused before I/O once the lease ended, a copy a plain fence", async () => {
    const lease = await redlock.acquire(["ended/a", "ended/b"], 10_000);
    const b = lease.fences[1] as LeaseFence;
    expect(b.lostReason).toBeUndefined();
    expect(() => refuseEndedLease(b)).not.toThrow();
    expect(Object.keys(b)).toEqual(["resource", "token", "holder"]);
    const copies = [{ ...b }, structuredClone(b)];
    for (const copy of copies)
      expect([copy, "lostReason" in copy]).toEqual([{ resource: "ended/b", token: 1n, holder: lease.holder }, false]);
    await lease.release();
    const lost = lease.lostReason;
    expect(lost).toBeInstanceOf(LeaseLostError);
    expect(b.lostReason).toBe(lost);
    let thrown: unknown;
    try {
      refuseEndedLease(b);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBe(lost);
    // A copy knows nothing of the lease: the storage's check of its token decides.
    for (const copy of copies) expect(() => refuseEndedLease(copy)).not.toThrow();
  });

  it("using() extends every key of the set past its TTL and releases them all; `await using` releases them all too", async () => {
    const set = ["using/a", "using/b"];
    // A TTL with room for a slow extension round on a loaded machine (fsync on every write), held well past it.
    const result = await redlock.using(set, 2_000, async (lease) => {
      expect(lease.fences.map((f) => f.resource)).toEqual(set);
      await sleep(3_000);
      await drained(t.clients);
      expect(lease.signal.aborted).toBe(false);
      expect(await leaseKeysOn(t.admin, set)).toEqual(Array(3).fill([lease.value, lease.value]));
      return lease.fences.map((f) => f.token);
    });
    expect(result).toEqual([1n, 1n]);
    await drained(t.clients);
    expect(await leaseKeysOn(t.admin, set)).toEqual(Array(3).fill([null, null]));

    let signal: AbortSignal | undefined;
    const block = async (): Promise<void> => {
      await using lease = await redlock.acquire(["dispose/a", "dispose/b"], 5_000);
      signal = lease.signal;
      await drained(t.clients);
      expect(await leaseKeysOn(t.admin, ["dispose/a", "dispose/b"])).toEqual(Array(3).fill([lease.value, lease.value]));
      throw new Error("work failed");
    };
    await expect(block()).rejects.toThrow("work failed");
    expect((signal?.reason as LeaseLostError).kind).toBe("released");
    expect((signal?.reason as LeaseLostError).fences.map((f) => f.resource)).toEqual(["dispose/a", "dispose/b"]);
    await drained(t.clients);
    expect(await leaseKeysOn(t.admin, ["dispose/a", "dispose/b"])).toEqual(Array(3).fill([null, null]));
  });

  it("using() on a set whose keys a majority lost: the signal aborts with quorum-lost naming every fence, and using() rethrows it", async () => {
    const set = ["lost/a", "lost/b"];
    const error = await redlock
      .using(set, 600, async (lease) => {
        await drained(t.clients);
        // a's key replaced on A and B: those nodes hold only part of the set.
        for (const redis of t.admin.slice(0, 2)) await holdAs(redis, "lost/a", "someone-else", 10_000);
        await new Promise((resolve) => lease.signal.addEventListener("abort", resolve, { once: true }));
        return "routine ended";
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseLostError);
    expect(error).toMatchObject({ kind: "quorum-lost", fences: [{ resource: "lost/a" }, { resource: "lost/b" }] });
    await drained(t.clients);
    expect(await leaseKeysOn(t.admin, set)).toEqual([
      ["someone-else", null],
      ["someone-else", null],
      [null, null],
    ]);
  });

  it("options.signal stops a set's retries: nothing of it is left held, and the free resource's counter never moved", async () => {
    const [free, taken] = ["abort/free", "abort/taken"];
    for (const redis of t.admin) await holdAs(redis, taken, "someone-else", 10_000);
    const patient = new Redlock(t.clients, { retryCount: 1_000, retryDelayMs: 10, retryJitterMs: 5 });
    const before = AbortSignal.abort(new Error("not now"));
    await expect(patient.acquire([free, taken], 5_000, { signal: before })).rejects.toThrow("not now");
    const stop = new AbortController();
    setTimeout(() => stop.abort(new Error("gave up")), 200);
    const error = await patient.acquire([free, taken], 5_000, { signal: stop.signal }).catch((e: unknown) => e);
    expect(error).toMatchObject({ name: "AbortError", cause: new Error("gave up") });
    await drained(t.clients);
    expect(await leaseKeysOn(t.admin, [free, taken])).toEqual(Array(3).fill([null, "someone-else"]));
    // Every attempt found `taken` held on every node: the script undid a's key each time and never advanced its counter.
    expect(await countersOn(t.admin, free)).toEqual([0n, 0n, 0n]);
  });
});
