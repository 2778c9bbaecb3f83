import { collect, oldSpaceMb } from "@fenced/servers/heap";
import { describe, expect, it } from "vitest";
import { onAnyDown } from "./node-watch.js";

/**
 * A round's down-listener is garbage once the round stops watching, whatever the collector did
 * meanwhile. Kept in a module-level Set it was not: once a mark-compact had promoted the Set's hash
 * table, the chain V8 links from each table it replaces to the next held every listener any later
 * table had held, and each listener's closure, in old space until the next mark-compact.
 */
describe("onAnyDown's registrations", () => {
  /** A round's registration: its listener holds about 4 KB, as a round's closure holds its state. */
  const register = (): (() => void) => {
    const state = new Array<number>(500).fill(Math.random());
    return onAnyDown(() => void state.length);
  };

  it("are not kept past their end by a collection that ran while rounds were watching", () => {
    // 64 rounds watching at once, as under load, each round replaced by the next as it ends.
    const watching = Array.from({ length: 64 }, register);
    collect("major");
    const before = oldSpaceMb();
    for (let i = 0; i < 2_000; i++) {
      watching.shift()?.();
      watching.push(register());
    }
    for (const stop of watching.splice(0)) stop();
    collect("minor");
    collect("minor");
    // With the Set, the listeners and their state were promoted: about 8 MB here.
    expect(oldSpaceMb() - before).toBeLessThan(2);
  });
});
