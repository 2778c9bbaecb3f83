import { checkFence } from "@fenced/fence";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fenceAt as f, pgHarness, type PgHarness } from "./test-support.js";
import { WriteOrder } from "./write-order.js";

describe("WriteOrder", () => {
  const fence = checkFence({ resource: "r", token: 5n, holder: "h" });
  it("a put comes after the newest version its store saw at its own fence; anything else is 0", () => {
    const order = new WriteOrder();
    expect(order.after("k", fence)).toBe("0");
    order.wrote("k", fence, "7");
    expect(order.after("k", fence)).toBe("7");
    // Acknowledged out of order (two puts of the key at once): the newer stays.
    order.wrote("k", fence, "6");
    expect(order.after("k", fence)).toBe("7");
    // Another token or holder: what this store saw tells nothing about that fence's writes.
    expect(order.after("k", checkFence({ resource: "r", token: 6n, holder: "h" }))).toBe("0");
    expect(order.after("k", checkFence({ resource: "r", token: 5n, holder: "other" }))).toBe("0");
    expect(order.after("k", checkFence({ resource: "r", token: 5n }))).toBe("0");
    order.wrote("k", checkFence({ resource: "r", token: 6n, holder: "h" }), "3");
    expect(order.after("k", fence)).toBe("0");
  });

  it("forgets the least recently written key beyond its capacity", () => {
    const order = new WriteOrder(2);
    order.wrote("a", fence, "1");
    order.wrote("b", fence, "2");
    order.wrote("a", fence, "3");
    order.wrote("c", fence, "4");
    expect(["a", "b", "c"].map((k) => order.after(k, fence))).toEqual(["3", "0", "4"]);
  });
});

describe("unconditional puts of one key at once, one store, one fence", () => {
  let h: PgHarness;
  beforeAll(async () => {
    h = await pgHarness();
  });
  afterAll(async () => {
    await h.close();
  });

  it("all land: those refused as out of order (they came after the same version) are sent again unordered", async () => {
    const store = await h.store("same_key_at_once");
    const fence = f("r", 1n, "h1");
    await store.put("k", -1, { fence });
    const results = await Promise.all(Array.from({ length: 16 }, (_, i) => store.put("k", i, { fence })));
    const versions = results.map((r) => BigInt(r.version));
    expect(new Set(versions).size).toBe(16);
    const newest = versions.reduce((a, b) => (a > b ? a : b));
    const record = await store.get("k");
    expect(BigInt(record?.version ?? "0")).toBe(newest);
    expect(record?.value).toBe(versions.indexOf(newest));
  });
});
