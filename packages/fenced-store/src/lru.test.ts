import { collect, oldSpaceMb } from "@fenced/servers/heap";
import { describe, expect, it } from "vitest";
import { Lru } from "./lru.js";

describe("Lru", () => {
  it("drops the oldest key not set again since, and gives a key set again a second chance", () => {
    const lru = new Lru<string, number>(3);
    lru.set("a", 1);
    lru.set("b", 2);
    lru.set("c", 3);
    lru.set("a", 10);
    lru.set("d", 4);
    // a was set again: it moved to the back; b, the oldest after it, went.
    expect([lru.get("a"), lru.get("b"), lru.get("c"), lru.get("d")]).toEqual([10, undefined, 3, 4]);
    lru.set("e", 5);
    expect(lru.get("c")).toBeUndefined();
    lru.delete("a");
    lru.set("f", 6);
    expect([lru.get("a"), lru.get("d"), lru.get("e"), lru.get("f")]).toEqual([undefined, 4, 5, 6]);
  });

  it("drops one entry even when every entry was set again", () => {
    const lru = new Lru<number, number>(4);
    for (let k = 0; k < 4; k++) lru.set(k, k);
    for (let k = 0; k < 4; k++) lru.set(k, k + 10);
    lru.set(4, 4);
    expect([0, 1, 2, 3, 4].map((k) => lru.get(k))).toEqual([undefined, 11, 12, 13, 4]);
  });

  /**
   * A value set over is garbage, whatever the collector did meanwhile. With a delete and a re-insert
   * per set, once a mark-compact had promoted the map's hash table, every value any later table held
   * stayed reachable from old space until the next mark-compact.
   */
  it("keeps no value it was set over alive through the collections", () => {
    const lru = new Lru<number, number[]>(64);
    for (let k = 0; k < 64; k++) lru.set(k, [k]);
    collect("major");
    const before = oldSpaceMb();
    // Each about 4 KB; the 64 last set (256 KB) are live, and may be promoted.
    for (let i = 0; i < 2_500; i++) lru.set(i % 64, new Array<number>(500).fill(i));
    collect("minor");
    collect("minor");
    expect(oldSpaceMb() - before).toBeLessThan(2);
  });
});
