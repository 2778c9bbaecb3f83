import { describe, expect, it } from "vitest";
import { planFaults, type ScheduleOptions } from "./nemesis.js";

const shape: Omit<ScheduleOptions, "seed"> = { ttlMs: 600, workers: 5, redisNodes: 5, clockNode: 0 };

describe("fault schedule", () => {
  it("is the same for the same seed and differs for another seed", () => {
    const a = planFaults({ ...shape, seed: 42 }, 60_000);
    const b = planFaults({ ...shape, seed: 42 }, 60_000);
    const c = planFaults({ ...shape, seed: 43 }, 60_000);
    expect(a.length).toBeGreaterThan(50);
    expect(b).toEqual(a);
    expect(c).not.toEqual(a);
  });

  it("has every kind of fault, pauses longer than the TTL, and faults ordered in time", () => {
    const faults = planFaults({ ...shape, seed: 7 }, 120_000);
    expect(new Set(faults.map((f) => f.kind))).toEqual(new Set(["pause-worker", "pause-in-rmw", "pause-redis", "kill-redis", "clock-jump", "delay"]));
    for (const f of faults) {
      if (f.kind === "pause-worker" || f.kind === "pause-in-rmw") expect(f.durationMs).toBeGreaterThan(shape.ttlMs);
      if (f.kind === "delay") expect(f.delayMs).toBeGreaterThanOrEqual(shape.ttlMs);
      if (f.kind === "clock-jump") expect(f.node).toBe(shape.clockNode);
    }
    const times = faults.map((f) => f.at);
    expect(times).toEqual([...times].sort((x, y) => x - y));
    expect(faults[0]?.at).toBeGreaterThanOrEqual(shape.ttlMs);
  });

  it("never pauses or kills a majority of the Redis nodes at once", () => {
    for (const seed of [1, 2, 3, 4, 5]) {
      const faults = planFaults({ ...shape, seed }, 300_000);
      const nodeFaults = faults.flatMap((f) => (f.kind === "pause-redis" || f.kind === "kill-redis" ? [{ node: f.node, from: f.at, to: f.at + f.durationMs }] : []));
      expect(nodeFaults.length).toBeGreaterThan(10);
      for (const f of nodeFaults) {
        const down = new Set(nodeFaults.filter((g) => g.from <= f.from && f.from < g.to).map((g) => g.node));
        expect(down.size).toBeLessThanOrEqual(2);
      }
    }
  });
});
