import { InvalidArgumentError } from "@fenced/fence";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LeaseLostError } from "./errors.js";
import { resourceKeys } from "./keys.js";
import { Redlock } from "./redlock.js";
import { drained, holdAs, leaseValuesOn, loadScripts, startTestNodes, type TestNodes } from "./test-support.js";

/**
 * redlock.extend(held) / redlock.release(held): a lease acquired by one process, extended and
 * released by another that knows only { resource, token, value } (a stateless gateway's case).
 */
describe("a lease held elsewhere", () => {
  let t: TestNodes;
  let acquirer: Redlock;
  let other: Redlock;

  beforeAll(async () => {
    t = await startTestNodes(3, { faults: true });
    await Promise.all(t.admin.map(loadScripts));
    acquirer = new Redlock(t.clients, { retryCount: 0 });
    // Its own connections: nothing is shared with the process that acquired.
    other = new Redlock(await t.moreClients(), { retryCount: 0 });
  });
  afterAll(async () => {
    await t?.stop();
  });

  const pttls = (resource: string): Promise<number[]> => Promise.all(t.admin.map((r) => r.pttl(resourceKeys(resource).lease)));

  it("extends on every node from another Redlock, keeping resource and token", async () => {
    const lease = await acquirer.acquire("held/extend", 1_000);
    const extended = await other.extend({ resource: lease.resource, token: lease.token, value: lease.value }, 20_000);
    expect(extended.resource).toBe("held/extend");
    expect(extended.token).toBe(lease.token);
    expect(extended.value).toBe(lease.value);
    expect(extended.remainingMs).toBeGreaterThan(15_000);
    expect(extended.validUntil).toBeGreaterThan(Date.now() + 15_000);
    await drained(t.admin);
    for (const pttl of await pttls("held/extend")) expect(pttl).toBeGreaterThan(15_000);
    await lease.release();
  });

  it("a value the nodes do not hold is refused with quorum-lost, and the real holder's key is untouched", async () => {
    const lease = await acquirer.acquire("held/forged", 5_000);
    const forged = { resource: lease.resource, token: lease.token, value: "0".repeat(32) };
    await expect(other.extend(forged, 60_000)).rejects.toSatisfy((e) => e instanceof LeaseLostError && e.kind === "quorum-lost");
    await other.release(forged);
    await drained(t.admin);
    expect(await leaseValuesOn(t.admin, "held/forged")).toEqual([lease.value, lease.value, lease.value]);
    for (const pttl of await pttls("held/forged")) expect(pttl).toBeLessThanOrEqual(5_000);
    await lease.release();
  });

  it("an expired lease cannot be extended, even after someone else held and released the resource", async () => {
    const lease = await acquirer.acquire("held/expired", 100);
    await new Promise((r) => setTimeout(r, 130));
    const next = await acquirer.acquire("held/expired", 1_000);
    await next.release();
    await expect(other.extend({ resource: lease.resource, token: lease.token, value: lease.value }, 10_000)).rejects.toBeInstanceOf(
      LeaseLostError,
    );
    await drained(t.admin);
    expect(await leaseValuesOn(t.admin, "held/expired")).toEqual([null, null, null]);
  });

  it("with the held lease's validUntil, confirmations count only before it: one already past asks nothing, late ones are expired", async () => {
    const lease = await acquirer.acquire("held/until", 10_000);
    const held = { resource: lease.resource, token: lease.token, value: lease.value };
    await drained(t.admin);
    const before = await pttls("held/until");
    // Nothing was sent: nothing of the call was applied.
    await expect(other.extend({ ...held, validUntil: Date.now() - 1 }, 60_000)).rejects.toSatisfy(
      (e) => e instanceof LeaseLostError && e.kind === "expired" && e.applied === "no",
    );
    await drained(t.admin);
    for (const [i, pttl] of (await pttls("held/until")).entries()) expect(pttl).toBeLessThanOrEqual(before[i] ?? 0);
    // A majority paused past the held end: their confirmations arrive after it (the node timeout is longer).
    const patient = new Redlock(await t.moreClients(), { retryCount: 0, nodeTimeoutMs: 5_000 });
    const [a, b] = t.nodes;
    a?.pause();
    b?.pause();
    const resume = setTimeout(() => {
      a?.resume();
      b?.resume();
    }, 400);
    try {
      // The nodes were asked, and the paused ones extend it late: some of the call may have been applied.
      await expect(patient.extend({ ...held, validUntil: Date.now() + 150 }, 60_000)).rejects.toSatisfy(
        (e) => e instanceof LeaseLostError && e.kind === "expired" && e.applied === "unknown",
      );
    } finally {
      await new Promise((r) => setTimeout(r, 450));
      clearTimeout(resume);
      a?.resume();
      b?.resume();
    }
    // In time, the same call extends.
    const extended = await other.extend({ ...held, validUntil: lease.validUntil }, 20_000);
    expect(extended.remainingMs).toBeGreaterThan(15_000);
    await lease.release();
  });

  it("extend counts only a quorum: with the key gone from two of three nodes the lease is lost", async () => {
    const lease = await acquirer.acquire("held/minority", 10_000);
    const [a, b] = t.admin;
    await a?.del(resourceKeys("held/minority").lease);
    await b?.del(resourceKeys("held/minority").lease);
    await expect(other.extend({ resource: lease.resource, token: lease.token, value: lease.value }, 10_000)).rejects.toBeInstanceOf(
      LeaseLostError,
    );
    await lease.release();
  });

  it("release from another Redlock deletes the key everywhere, and never a key holding another value", async () => {
    const lease = await acquirer.acquire("held/release", 10_000);
    await other.release({ resource: lease.resource, token: lease.token, value: lease.value });
    // release() resolves once a quorum answered: the last node's delete is behind other's own connections.
    await drained(other.clients);
    await drained(t.admin);
    expect(await leaseValuesOn(t.admin, "held/release")).toEqual([null, null, null]);
    // Idempotent; and once another client holds the resource, the old value releases nothing.
    const [first] = t.admin;
    if (first === undefined) throw new Error("no node");
    await holdAs(first, "held/release", "f".repeat(32), 10_000);
    await other.release({ resource: lease.resource, token: lease.token, value: lease.value });
    await drained(other.clients);
    await drained(t.admin);
    expect(await leaseValuesOn(t.admin, "held/release")).toEqual(["f".repeat(32), null, null]);
  });

  it("rejects malformed input with InvalidArgumentError before any I/O", async () => {
    const value = "a".repeat(32);
    const bad: [unknown, string][] = [
      [null, "held"],
      [{ resource: "r", token: 1, value }, "held.token"],
      [{ resource: "r", token: -1n, value }, "held.token"],
      [{ resource: "r", token: 2n ** 63n, value }, "held.token"],
      [{ resource: "", token: 1n, value }, "held.resource"],
      [{ resource: "tab\there", token: 1n, value }, "held.resource"],
      [{ resource: "\ud800", token: 1n, value }, "held.resource"],
      [{ resource: "r", token: 1n, value: "A".repeat(32) }, "held.value"],
      [{ resource: "r", token: 1n, value: "a".repeat(31) }, "held.value"],
      [{ resource: "r", token: 1n, value: 7 }, "held.value"],
      [{ resource: "r", token: 1n, value, validUntil: "1" }, "held.validUntil"],
      [{ resource: "r", token: 1n, value, validUntil: NaN }, "held.validUntil"],
    ];
    const lease = await acquirer.acquire("held/bad-input", 5_000);
    await drained(t.admin);
    const before = await leaseValuesOn(t.admin, "held/bad-input");
    for (const [held, argument] of bad) {
      const expected = expect.objectContaining({ argument }) as Error;
      await expect(other.extend(held as never, 1_000)).rejects.toThrow(InvalidArgumentError);
      await expect(other.extend(held as never, 1_000)).rejects.toThrow(expected);
      await expect(other.release(held as never)).rejects.toThrow(expected);
    }
    // A valid lease with a bad TTL: refused before the nodes see anything, and the lease is untouched.
    const held = { resource: lease.resource, token: lease.token, value: lease.value };
    await expect(other.extend(held, 0)).rejects.toThrow(
      expect.objectContaining({ name: "InvalidArgumentError", argument: "ttlMs" }) as Error,
    );
    expect(await leaseValuesOn(t.admin, "held/bad-input")).toEqual(before);
    await lease.release();
  });
});
