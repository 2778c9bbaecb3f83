import { describe, expect, it } from "vitest";
import { planFaults, scheduleCoverageMs, type Fault, type ScheduleOptions } from "./nemesis.js";
import { storeFaults } from "./fault-streams.js";
import { STORE_FAULT_KINDS, STORE_FAULTS } from "./history.js";

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
    expect(new Set(faults.map((f) => f.kind))).toEqual(
      new Set(["pause-worker", "pause-in-rmw", "pause-redis", "kill-redis", "wipe-redis", "clock-jump", "delay", "reset"]),
    );
    for (const f of faults) {
      if (f.kind === "pause-worker" || f.kind === "pause-in-rmw") expect(f.durationMs).toBeGreaterThan(shape.ttlMs);
      if (f.kind === "delay") expect(f.delayMs).toBeGreaterThanOrEqual(shape.ttlMs);
      if (f.kind === "clock-jump") expect(f.node).toBe(shape.clockNode);
    }
    const times = faults.map((f) => f.at);
    expect(times).toEqual([...times].sort((x, y) => x - y));
    // Ids are positions: the injector keys active faults by them.
    expect(faults.map((f) => f.id)).toEqual(faults.map((_, i) => i));
    expect(faults[0]?.at).toBeGreaterThanOrEqual(shape.ttlMs);
  });

  it("with a gateway, adds pauses of the gateway process and leaves every other fault where it was", () => {
    const withoutIds = (faults: Fault[]): Omit<Fault, "id">[] => faults.map(({ id: _id, ...rest }) => rest);
    for (const seed of [1, 20]) {
      const library = planFaults({ ...shape, seed }, 120_000);
      const gateway = planFaults({ ...shape, seed, gateway: true }, 120_000);
      expect(library.some((f) => f.kind === "pause-gateway")).toBe(false);
      const pauses = gateway.filter((f) => f.kind === "pause-gateway");
      expect(withoutIds(gateway.filter((f) => f.kind !== "pause-gateway"))).toEqual(withoutIds(library));
      // Every few seconds, each longer than the TTL, never two at once.
      expect(pauses.length).toBeGreaterThanOrEqual(120 / 10);
      for (const [i, p] of pauses.entries()) {
        expect(p.durationMs).toBeGreaterThan(shape.ttlMs);
        const next = pauses[i + 1];
        if (next !== undefined) expect(next.at).toBeGreaterThan(p.at + p.durationMs);
      }
      const times = gateway.map((f) => f.at);
      expect(times).toEqual([...times].sort((x, y) => x - y));
      expect(gateway.map((f) => f.id)).toEqual(gateway.map((_, i) => i));
    }
  });

  it("with a backend, adds pauses and kills of its store server, one at a time, and leaves every other fault where it was", () => {
    const withoutIds = (faults: Fault[]): Omit<Fault, "id">[] => faults.map(({ id: _id, ...rest }) => rest);
    for (const [backend, pause, kill] of [
      ["postgres", "pause-postgres", "kill-postgres"],
      ["s3", "pause-s3", "kill-s3"],
      ["dynamodb", "pause-dynamodb", "kill-dynamodb"],
      // azurite is never killed (it saves its metadata every 5 s): pauses only.
      ["azure-blob", "pause-azure-blob", undefined],
    ] as const) {
      const plain = planFaults({ ...shape, seed: 3, gateway: true }, 120_000);
      const faults = planFaults({ ...shape, seed: 3, gateway: true, store: backend }, 120_000);
      expect(withoutIds(faults.filter((f) => !STORE_FAULTS.has(f.kind)))).toEqual(withoutIds(plain));
      const store = faults.filter((f) => STORE_FAULTS.has(f.kind) && f.kind !== "skew-s3");
      expect(new Set(store.map((f) => f.kind))).toEqual(new Set(kill === undefined ? [pause] : [pause, kill]));
      // About one every 8 TTLs between faults (kills add their restart margin); some pauses outlast the stores' 2 s deadline of the chaos runs.
      expect(store.length).toBeGreaterThanOrEqual(120_000 / (16 * shape.ttlMs));
      expect(store.some((f) => f.kind === pause && f.durationMs > 2_000)).toBe(true);
      for (const [i, f] of store.entries()) {
        const next = store[i + 1];
        if (next !== undefined) expect(next.at).toBeGreaterThan(f.at + f.durationMs);
      }
      expect(faults.map((f) => f.id)).toEqual(faults.map((_, i) => i));
    }
    expect(planFaults({ ...shape, seed: 3 }, 120_000).some((f) => STORE_FAULTS.has(f.kind))).toBe(false);
  });

  it("with S3, skews radosgw's clock 4.5 to 14 minutes either way, one skew at a time", () => {
    const faults = planFaults({ ...shape, seed: 3, store: "s3" }, 120_000);
    const skews = faults.flatMap((f) => (f.kind === "skew-s3" ? [f] : []));
    // About one every 6 TTLs between skews of 2 to 5 TTLs.
    expect(skews.length).toBeGreaterThanOrEqual(120_000 / (12 * shape.ttlMs));
    for (const [i, f] of skews.entries()) {
      expect(Math.abs(f.skewMs)).toBeGreaterThanOrEqual(4.5 * 60_000);
      expect(Math.abs(f.skewMs)).toBeLessThanOrEqual(14 * 60_000);
      const next = skews[i + 1];
      if (next !== undefined) expect(next.at).toBeGreaterThan(f.at + f.durationMs);
    }
    expect(new Set(skews.map((f) => Math.sign(f.skewMs)))).toEqual(new Set([-1, 1]));
    expect(planFaults({ ...shape, seed: 3, store: "postgres" }, 120_000).some((f) => f.kind === "skew-s3")).toBe(false);
  });

  it("resets connections every couple of TTLs, on a stream of their own that can be turned off", () => {
    const withoutIds = (faults: Fault[]): Omit<Fault, "id">[] => faults.map(({ id: _id, ...rest }) => rest);
    const all = planFaults({ ...shape, seed: 4 }, 60_000);
    const resets = all.filter((f) => f.kind === "reset");
    expect(resets.length).toBeGreaterThanOrEqual(60_000 / (3 * shape.ttlMs));
    expect(resets.some((f) => f.kind === "reset" && f.link === "store")).toBe(true);
    expect(resets.some((f) => f.kind === "reset" && f.link !== "store")).toBe(true);
    const without = planFaults({ ...shape, seed: 4, resets: false }, 60_000);
    expect(withoutIds(without)).toEqual(withoutIds(all.filter((f) => f.kind !== "reset")));
  });

  it("never pauses or kills a majority of the Redis nodes at once, except at the instant of a wipe", () => {
    for (const seed of [1, 2, 3, 4, 5]) {
      const faults = planFaults({ ...shape, seed }, 300_000);
      const nodeFaults = faults.flatMap((f) =>
        f.kind === "pause-redis" || f.kind === "kill-redis" ? [{ node: f.node, from: f.at, to: f.at + f.durationMs }] : [],
      );
      expect(nodeFaults.length).toBeGreaterThan(10);
      for (const f of nodeFaults) {
        const down = new Set(nodeFaults.filter((g) => g.from <= f.from && f.from < g.to).map((g) => g.node));
        expect(down.size).toBeLessThanOrEqual(2);
      }
    }
  });

  it("wipes in rounds: the minority is killed, and restarted as the majority is wiped at once, and nothing else touches a node meanwhile", () => {
    let rounds = 0;
    for (const seed of [1, 2, 3, 4, 5]) {
      const faults = planFaults({ ...shape, seed }, 300_000);
      const wipesAt = new Map<number, Fault[]>();
      for (const f of faults) if (f.kind === "wipe-redis") wipesAt.set(f.at, [...(wipesAt.get(f.at) ?? []), f]);
      for (const [at, wipes] of wipesAt) {
        rounds++;
        // A majority, each node once, restarted at once.
        const wiped = new Set(wipes.map((f) => (f.kind === "wipe-redis" ? f.node : -1)));
        expect(wiped.size).toBe(3);
        for (const f of wipes) expect(f.durationMs).toBe(0);
        // The other two were killed (with their data) together, longer than a TTL, and restart at the wipe:
        // never a moment with every node up and the minority behind, in which a publish would heal it (REJOIN_MS).
        const killed = faults.filter((f) => f.kind === "kill-redis" && !wiped.has(f.node) && f.at < at && f.at + f.durationMs === at);
        expect(new Set(killed.map((f) => (f.kind === "kill-redis" ? f.node : -1))).size).toBe(2);
        const start = Math.min(...killed.map((f) => f.at));
        for (const f of killed) expect(f.durationMs).toBeGreaterThanOrEqual(shape.ttlMs);
        // No other node fault from the round's start until a second after the wipe.
        const others = faults.filter(
          (f) =>
            (f.kind === "pause-redis" || f.kind === "kill-redis" || f.kind === "wipe-redis") &&
            f.at >= start &&
            f.at <= at + 1_000 &&
            !killed.includes(f) &&
            !wipes.includes(f),
        );
        expect(others).toEqual([]);
      }
    }
    // A few rounds per minute of run.
    expect(rounds / 25).toBeGreaterThan(2);
  });
});

describe("store fault stream", () => {
  it("opens with a pause and then, soon after it, a kill, for every seed (a quick run meets both)", () => {
    for (let seed = 0; seed < 500; seed++) {
      for (const backend of ["postgres", "s3", "dynamodb", "azure-blob"] as const) {
        const stream = storeFaults({ seed, ttlMs: 600 } as ScheduleOptions, backend);
        const [first, second] = [stream.next().value, stream.next().value];
        const { pause, kill } = STORE_FAULT_KINDS[backend];
        // A server never killed (azurite) is paused a second time instead.
        expect([first.kind, second.kind]).toEqual([pause, kill ?? pause]);
        expect(second.at - (first.at + first.durationMs)).toBeLessThan(1_000);
        expect(second.at).toBeLessThan(12_000);
      }
    }
  });
});

describe("schedule coverage", () => {
  it("reaches past the first wipe and the first store kill's restart, so that a run whose operations finish early still meets both", () => {
    for (let seed = 0; seed < 200; seed++) {
      for (const store of [undefined, "postgres", "s3", "dynamodb", "azure-blob"] as const) {
        const options: ScheduleOptions = { ...shape, seed, ...(store === undefined ? {} : { store }) };
        const faults = planFaults(options, 60_000);
        const wipe = faults.find((f) => f.kind === "wipe-redis");
        const coverage = scheduleCoverageMs(options);
        expect(wipe).toBeDefined();
        expect(coverage).toBeGreaterThan((wipe?.at ?? Infinity) + 1_000);
        if (store !== undefined) {
          // The first kill's restart; a server never killed (azurite): the end of its first pause.
          const { pause, kill: killKind } = STORE_FAULT_KINDS[store];
          const kill = faults.find((f) => f.kind === (killKind ?? pause));
          expect(coverage).toBeGreaterThanOrEqual((kill?.at ?? Infinity) + (kill?.durationMs ?? 0) + (killKind === undefined ? 0 : 1));
        }
        // Within a minute for any seed (the first wipe round comes when the draw puts it).
        expect(coverage).toBeLessThan(60_000);
      }
    }
    // The quick runs' seed: seconds.
    expect(scheduleCoverageMs({ ...shape, seed: 1, store: "s3" })).toBeLessThan(10_000);
  });

  it("over several wipe rounds, reaches past the last of them (a run none of whose rounds showed goes on that long)", () => {
    for (let seed = 0; seed < 50; seed++) {
      const options: ScheduleOptions = { ...shape, seed, store: "s3" };
      const wipes = [...new Set(planFaults(options, 300_000).flatMap((f) => (f.kind === "wipe-redis" ? [f.at] : [])))];
      expect(scheduleCoverageMs(options, 3)).toBeGreaterThan((wipes[2] ?? Infinity) + 1_000);
      expect(scheduleCoverageMs(options, 3)).toBeLessThan((wipes[3] ?? Infinity) + 1_000);
      expect(scheduleCoverageMs(options, 3)).toBeGreaterThanOrEqual(scheduleCoverageMs(options, 1));
    }
    // The quick runs' seed: its third round within 20 s.
    expect(scheduleCoverageMs({ ...shape, seed: 1, store: "s3" }, 3)).toBeLessThan(20_000);
  });
});
