import { inspect } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ANSWERING_NODE_TIMEOUT_MS } from "@fenced/servers";
import { holderOf, type Lease } from "./lease.js";
import { Redlock } from "./redlock.js";
import { loadScripts, startTestNodes, type TestNodes } from "./test-support.js";

/** Every 8-character window of the value, and the value whole: none may appear where a lease is printed. */
function pieces(value: string): string[] {
  const windows = Array.from({ length: value.length - 7 }, (_, i) => value.slice(i, i + 8));
  return [value, ...windows];
}

function expectNoPartOf(value: string, printed: string): void {
  for (const piece of pieces(value)) expect(printed, `shows ${piece} of the value`).not.toContain(piece);
}

/**
 * A lease's value is its secret (whoever knows it can extend or release the lease): printing or
 * serialising a lease shows what identifies it, never any part of the value. The holder id is a
 * one-way hash of the value, public by design (the stores record it).
 */
describe("a lease keeps its value to itself", () => {
  let t: TestNodes;
  let redlock: Redlock;

  beforeAll(async () => {
    t = await startTestNodes(3);
    await Promise.all(t.admin.map(loadScripts));
    redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
  });
  afterAll(async () => {
    await t?.stop();
  });

  const printings = (lease: Lease): Record<string, string> => ({
    inspect: inspect(lease),
    "inspect (depth, hidden)": inspect(lease, { depth: Infinity, showHidden: true }),
    "inspect without custom inspection": inspect(lease, { customInspect: false, showHidden: true }),
    "inspect inside an object": inspect({ nested: { lease } }),
    "JSON.stringify": JSON.stringify(lease),
    "JSON.stringify inside an object": JSON.stringify({ lease }),
  });

  it("inspect() and JSON.stringify() show resource, token, holder, validity and loss, and no part of the value", async () => {
    const lease = await redlock.acquire("secret/print", 10_000);
    try {
      for (const [how, printed] of Object.entries(printings(lease))) {
        expectNoPartOf(lease.value, printed);
        // (Without custom inspection, inspect lists the prototype's getters by name: "[value]: [Getter]".)
        if (!how.includes("without custom")) expect(printed, how).not.toMatch(/\bvalue\b/i);
      }
      expect(inspect(lease)).toContain("secret/print");
      expect(inspect(lease)).toContain(`${lease.token}n`);
      expect(inspect(lease)).toContain(lease.holder);
      expect(JSON.parse(JSON.stringify(lease))).toEqual({
        resource: "secret/print",
        token: lease.token.toString(),
        holder: lease.holder,
        validUntil: lease.validUntil,
        lost: false,
      });
    } finally {
      await lease.release();
    }
    // Released: still printable, still without the value, and it says that it is lost.
    expect(JSON.parse(JSON.stringify(lease))).toMatchObject({ lost: true });
    expect(inspect(lease)).toMatch(/lost: true/);
    for (const printed of Object.values(printings(lease))) expectNoPartOf(lease.value, printed);
  });

  it("the value is no own property, yet lease.value still reads it (for handing the lease on)", async () => {
    const lease = await redlock.acquire("secret/props", 10_000);
    try {
      expect(Object.keys(lease)).not.toContain("value");
      expect(Object.getOwnPropertyNames(lease)).not.toContain("value");
      expect(Object.values(lease)).not.toContain(lease.value);
      expect({ ...lease }).not.toHaveProperty("value");
      expect(lease.value).toMatch(/^[0-9a-f]{32}$/);
      // The holder id is public: derived one-way from the value, it shows nothing of it.
      expect(lease.holder).toBe(holderOf(lease.value));
      expectNoPartOf(lease.value, lease.holder);
      // What a process hands on to another is built from the value explicitly.
      const held = { resource: lease.resource, token: lease.token, value: lease.value };
      // Nodes that are up: a grant, however loaded the machine (fresh clients connect and load the script first).
      const other = new Redlock(await t.moreClients(), { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
      const extended = await other.extend(held, 10_000);
      expect(extended.holder).toBe(lease.holder);
    } finally {
      await lease.release();
    }
  });

  it("lose and tryExtend are not reachable on a lease; its public operations are", async () => {
    const lease = await redlock.acquire("secret/internals", 10_000);
    try {
      for (const name of ["lose", "tryExtend"]) {
        expect(name in lease, name).toBe(false);
        expect((lease as unknown as Record<string, unknown>)[name], name).toBeUndefined();
      }
      for (const name of [
        "extend",
        "release",
        "signal",
        "lostReason",
        "remainingMs",
        "validUntil",
        "holder",
        "value",
        "resource",
        "token",
      ]) {
        expect(name in lease, name).toBe(true);
      }
      expect(Symbol.asyncDispose in lease).toBe(true);
      await lease.extend(10_000);
      expect(lease.lostReason).toBeUndefined();
    } finally {
      await lease.release();
    }
    expect(lease.lostReason?.kind).toBe("released");
  });
});
