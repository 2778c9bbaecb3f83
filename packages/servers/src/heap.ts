import { getHeapSpaceStatistics, setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

/**
 * The collector by hand, for the tests of what outlives a collection (a Map's or a Set's replaced
 * hash tables keeping what they held, in every package): a collection now, and old space's use. The
 * one definition: `@fenced/servers/heap` loads nothing else of this package (no server, no process).
 */

type Gc = (options: { type: "minor" | "major" }) => void;

let gc: Gc | undefined;

/** V8's own collection now: "minor" a scavenge of the young generation, "major" a mark-compact of the whole heap. */
export function collect(type: "minor" | "major"): void {
  // --expose-gc set at run time defines gc() in contexts made from then on, a new one here.
  if (gc === undefined) {
    setFlagsFromString("--expose-gc");
    gc = runInNewContext("gc") as Gc;
  }
  gc({ type });
}

/** Old space's used size, in MB: what objects promoted out of the young generation take. */
export function oldSpaceMb(): number {
  return (getHeapSpaceStatistics().find((s) => s.space_name === "old_space")?.space_used_size ?? 0) / 1024 / 1024;
}
