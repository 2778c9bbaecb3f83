import type { RedisNodeHandle, ServerFaults } from "@fenced/servers";
import { describe, expect, it } from "vitest";
import type { DelayProxy } from "./delay-proxy.js";
import { FaultInjector, type FaultTargets } from "./fault-injector.js";
import type { NemesisEvent } from "./history.js";
import type { Fault } from "./nemesis.js";

/** Records what the injector does instead of doing it. */
function fakes(): { targets: FaultTargets; actions: string[]; delays: () => number } {
  const actions: string[] = [];
  let delays = 0;
  const node = (name: string): RedisNodeHandle => {
    let running = true;
    let paused = false;
    return {
      name,
      host: "127.0.0.1",
      port: 0,
      url: "",
      controllable: true,
      get running() {
        return running;
      },
      get paused() {
        return paused;
      },
      kill: () => {
        running = false;
        actions.push(`kill ${name}`);
        return Promise.resolve();
      },
      restart: (o) => {
        running = true;
        actions.push(`restart ${name} keepData=${String(o?.keepData)}`);
        return Promise.resolve();
      },
      pause: () => {
        paused = true;
        actions.push(`pause ${name}`);
      },
      resume: () => {
        paused = false;
        actions.push(`resume ${name}`);
      },
      setClockOffsetMs: (ms) => void actions.push(`clock ${name} ${ms}`),
    };
  };
  const proxy = {
    resetConnections: () => {
      actions.push("reset");
      return 1;
    },
    addDelay: (directions: string, ms: number) => {
      delays++;
      actions.push(`delay ${directions} ${ms}`);
      return () => void delays--;
    },
  } as unknown as DelayProxy;
  const targets: FaultTargets = {
    pauseWorker: (w) => void actions.push(`stop worker ${w}`),
    resumeWorker: (w) => void actions.push(`cont worker ${w}`),
    armPauseInRmw: (w, fault) => void actions.push(`arm worker ${w} for ${fault}`),
    releaseWorker: (w, fault) => void actions.push(`release worker ${w} from ${fault}`),
    redis: [node("A"), node("B"), node("C")],
    proxy: () => proxy,
  };
  return { targets, actions, delays: () => delays };
}

describe("fault injector", () => {
  it("applies faults on time and stop() undoes every one still active, releasing a worker stopped between read and write too", async () => {
    const schedule: Fault[] = [
      { id: 0, at: 0, kind: "pause-worker", worker: 1, durationMs: 60_000 },
      { id: 1, at: 0, kind: "kill-redis", node: 1, durationMs: 60_000 },
      { id: 2, at: 0, kind: "pause-redis", node: 2, durationMs: 60_000 },
      { id: 3, at: 0, kind: "clock-jump", node: 0, jumpMs: 700, durationMs: 0 },
      { id: 4, at: 0, kind: "clock-jump", node: 0, jumpMs: 500, durationMs: 0 },
      { id: 5, at: 0, kind: "delay", worker: 0, link: "store", directions: "up", delayMs: 900, durationMs: 60_000 },
      { id: 6, at: 0, kind: "pause-in-rmw", worker: 3, durationMs: 60_000 },
      { id: 7, at: 0, kind: "wipe-redis", node: 0, durationMs: 0 },
      // Far in the future: must never be applied.
      { id: 8, at: 3_600_000, kind: "pause-worker", worker: 2, durationMs: 1 },
    ];
    const { targets, actions, delays } = fakes();
    const events: NemesisEvent[] = [];
    const started = performance.now();
    const injector = new FaultInjector(
      schedule[Symbol.iterator](),
      targets,
      (e) => events.push(e),
      () => performance.now() - started,
      600,
    );
    injector.start();
    await new Promise((r) => setTimeout(r, 100));
    injector.reachedRmw(3, 6, 50);
    expect(actions).toEqual(
      expect.arrayContaining([
        "stop worker 1",
        "kill B",
        "pause C",
        "clock A 700",
        "clock A 1200",
        "delay up 900",
        "arm worker 3 for 6",
        "stop worker 3",
      ]),
    );
    // The wiped node is back at once, without its data; the killed one stays down until its time is up.
    expect(actions).toEqual(expect.arrayContaining(["kill A", "restart A keepData=false"]));
    expect(actions).not.toContain("restart B keepData=true");
    expect(delays()).toBe(1);

    await injector.stop();
    expect(actions).toEqual(expect.arrayContaining(["cont worker 1", "restart B keepData=true", "resume C", "cont worker 3"]));
    // The waiting worker is told to go on before it is continued.
    expect(actions.indexOf("release worker 3 from 6")).toBe(actions.indexOf("cont worker 3") - 1);
    expect(actions).not.toContain("stop worker 2");
    expect(delays()).toBe(0);
    expect(injector.faults).toEqual({
      "pause-worker": 1,
      "pause-in-rmw": 1,
      "pause-redis": 1,
      "kill-redis": 1,
      "wipe-redis": 1,
      "clock-jump": 2,
      delay: 1,
      reset: 0,
      "pause-gateway": 0,
      "pause-postgres": 0,
      "kill-postgres": 0,
      "pause-s3": 0,
      "kill-s3": 0,
      "pause-dynamodb": 0,
      "kill-dynamodb": 0,
      "pause-azure-blob": 0,
      "skew-s3": 0,
    });
    // Every fault that started has ended (a clock jump is instantaneous: both at once).
    const starts = events.filter((e) => e.phase === "start").map((e) => e.fault);
    const ends = events.filter((e) => e.phase === "end").map((e) => e.fault);
    expect(new Set(ends)).toEqual(new Set(starts));

    // A worker reporting after stop() is released at once rather than left waiting.
    injector.reachedRmw(0, 99, 0);
    await expect.poll(() => actions.slice(-3), { timeout: 5_000 }).toEqual(["stop worker 0", "release worker 0 from 99", "cont worker 0"]);
  });

  it("pauses the gateway process, resumes it on time or at stop(), and names the link a delay really acts on", async () => {
    const { targets, actions } = fakes();
    const gateway = {
      pause: () => void actions.push("stop gateway"),
      resume: () => void actions.push("cont gateway"),
    };
    const schedule: Fault[] = [
      { id: 0, at: 0, kind: "pause-gateway", durationMs: 30 },
      { id: 1, at: 0, kind: "delay", worker: 2, link: 1, directions: "down", delayMs: 900, durationMs: 60_000 },
      { id: 2, at: 60, kind: "pause-gateway", durationMs: 60_000 },
    ];
    const events: NemesisEvent[] = [];
    const started = performance.now();
    const injector = new FaultInjector(
      schedule[Symbol.iterator](),
      { ...targets, gateway, linkName: (link) => (link === "store" ? "store" : "gateway") },
      (e) => events.push(e),
      () => performance.now() - started,
      600,
    );
    injector.start();
    await new Promise((r) => setTimeout(r, 120));
    // The first pause ended on its own before the second began.
    expect(actions.filter((a) => a.endsWith("gateway"))).toEqual(["stop gateway", "cont gateway", "stop gateway"]);
    await injector.stop();
    expect(actions.filter((a) => a.endsWith("gateway"))).toEqual(["stop gateway", "cont gateway", "stop gateway", "cont gateway"]);
    expect(injector.faults["pause-gateway"]).toBe(2);
    expect(events.find((e) => e.kind === "pause-gateway")?.target).toBe("gateway");
    // Through a gateway a worker reaches no Redis node: the delay acts on its link to the gateway, and says so.
    expect(events.find((e) => e.kind === "delay")?.target).toBe("worker 2 → gateway (down, 900 ms)");

    // Without a gateway process the fault finds nothing to act on.
    const alone = new FaultInjector(
      [{ id: 0, at: 0, kind: "pause-gateway", durationMs: 10 } as Fault][Symbol.iterator](),
      targets,
      () => undefined,
      () => performance.now() - started,
      600,
    );
    alone.start();
    await new Promise((r) => setTimeout(r, 20));
    await alone.stop();
    expect(alone.missed).toBe(1);
  });

  it("records an armed pause that never found its worker between read and write as missed", async () => {
    const { targets } = fakes();
    const events: NemesisEvent[] = [];
    const started = performance.now();
    const schedule: Fault[] = [{ id: 0, at: 0, kind: "pause-in-rmw", worker: 0, durationMs: 1_000 }];
    // TTL 10 ms: the arm window is two TTLs.
    const injector = new FaultInjector(
      schedule[Symbol.iterator](),
      targets,
      (e) => events.push(e),
      () => performance.now() - started,
      10,
    );
    injector.start();
    await new Promise((r) => setTimeout(r, 80));
    await injector.stop();
    expect(events.map((e) => e.phase)).toEqual(["missed"]);
    expect(injector.missed).toBe(1);
  });

  it("skews radosgw's clock for the fault's duration and sets it back (at stop() too); without clock control it is missed", async () => {
    const { targets } = fakes();
    const offsets: number[] = [];
    const storeClock = { setOffsetMs: (ms: number) => void offsets.push(ms) };
    const events: NemesisEvent[] = [];
    const started = performance.now();
    const schedule: Fault[] = [
      { id: 0, at: 0, kind: "skew-s3", skewMs: -300_000, durationMs: 5 },
      { id: 1, at: 30, kind: "skew-s3", skewMs: 840_000, durationMs: 60_000 },
    ];
    const injector = new FaultInjector(
      schedule[Symbol.iterator](),
      { ...targets, storeClock },
      (e) => events.push(e),
      () => performance.now() - started,
      600,
    );
    injector.start();
    await expect.poll(() => offsets.length, { timeout: 5_000, interval: 5 }).toBe(3);
    expect(offsets).toEqual([-300_000, 0, 840_000]);
    await injector.stop(); // the second is still on: stop() sets the clock back
    expect(offsets).toEqual([-300_000, 0, 840_000, 0]);
    expect(injector.faults["skew-s3"]).toBe(2);
    expect(events.filter((e) => e.phase === "start").map((e) => e.target)).toEqual(["radosgw clock -5.0 min", "radosgw clock +14.0 min"]);

    const without = new FaultInjector(
      ([{ id: 0, at: 0, kind: "skew-s3", skewMs: 300_000, durationMs: 5 }] as Fault[])[Symbol.iterator](),
      targets,
      () => undefined,
      () => performance.now() - started,
      600,
    );
    without.start();
    await expect.poll(() => without.missed, { timeout: 5_000, interval: 5 }).toBe(1);
    await without.stop();
  });

  it("pauses and kills the store server one fault at a time, restarts it with its data, and resets a worker's connections", async () => {
    const { targets, actions } = fakes();
    let running = true;
    let paused = false;
    const store: ServerFaults = {
      get running() {
        return running;
      },
      get paused() {
        return paused;
      },
      pause: () => {
        paused = true;
        actions.push("stop store");
      },
      resume: () => {
        paused = false;
        actions.push("cont store");
      },
      kill: () => {
        running = false;
        actions.push("kill store");
        return Promise.resolve();
      },
      restart: async () => {
        await new Promise((r) => setTimeout(r, 20));
        running = true;
        actions.push("restart store");
      },
    };
    const schedule: Fault[] = [
      { id: 0, at: 0, kind: "pause-postgres", durationMs: 30 },
      // While the pause lasts: missed.
      { id: 1, at: 10, kind: "kill-postgres", durationMs: 10 },
      { id: 2, at: 50, kind: "kill-postgres", durationMs: 10 },
      // While the kill's restart runs: missed.
      { id: 3, at: 65, kind: "pause-postgres", durationMs: 10 },
      { id: 4, at: 70, kind: "reset", worker: 1, link: "store", durationMs: 0 },
      { id: 5, at: 120, kind: "kill-postgres", durationMs: 60_000 },
    ];
    const events: NemesisEvent[] = [];
    const started = performance.now();
    const injector = new FaultInjector(
      schedule[Symbol.iterator](),
      { ...targets, store },
      (e) => events.push(e),
      () => performance.now() - started,
      600,
    );
    injector.start();
    await new Promise((r) => setTimeout(r, 160));
    expect(actions).toEqual(["stop store", "cont store", "kill store", "reset", "restart store", "kill store"]);
    await injector.stop();
    expect(actions.at(-1)).toBe("restart store");
    expect(running).toBe(true);
    expect(injector.missed).toBe(2);
    expect(injector.faults).toMatchObject({ "pause-postgres": 1, "kill-postgres": 2, reset: 1 });
    expect(injector.failures).toEqual([]);
    expect(events.find((e) => e.kind === "reset")).toMatchObject({ target: "worker 1 → store", worker: 1, phase: "start" });
    expect(events.find((e) => e.kind === "kill-postgres")?.target).toBe("postgres");

    // A restart that fails is a failure of the run, not a silent miss.
    const broken = { ...store, restart: () => Promise.reject(new Error("port taken")) };
    running = true;
    const failing = new FaultInjector(
      ([{ id: 0, at: 0, kind: "kill-s3", durationMs: 5 }] as Fault[])[Symbol.iterator](),
      { ...targets, store: broken },
      () => undefined,
      () => performance.now() - started,
      600,
    );
    failing.start();
    await new Promise((r) => setTimeout(r, 40));
    await failing.stop();
    expect(failing.failures).toEqual([expect.stringMatching(/port taken/)]);
  });

  it("marks the faults that stall a worker's calls outside the deadline, for liveness", async () => {
    const { targets } = fakes();
    const schedule: Fault[] = [
      { id: 0, at: 0, kind: "pause-worker", worker: 1, durationMs: 10 },
      { id: 1, at: 0, kind: "delay", worker: 2, link: 0, directions: "both", delayMs: 900, durationMs: 10 },
      { id: 2, at: 0, kind: "delay", worker: 3, link: "store", directions: "up", delayMs: 800, durationMs: 10 },
      { id: 3, at: 0, kind: "pause-gateway", durationMs: 10 },
    ];
    const events: NemesisEvent[] = [];
    const started = performance.now();
    const gateway = { pause: () => undefined, resume: () => undefined };
    const linkName = (link: number | "store"): string => (link === "store" ? "store" : "gateway");
    const injector = new FaultInjector(
      schedule[Symbol.iterator](),
      { ...targets, gateway, linkName },
      (e) => events.push(e),
      () => performance.now() - started,
      600,
    );
    injector.start();
    await new Promise((r) => setTimeout(r, 40));
    await injector.stop();
    const starts = events.filter((e) => e.phase === "start");
    expect(starts.find((e) => e.fault === 0)).toMatchObject({ stalls: "worker", worker: 1 });
    expect(starts.find((e) => e.fault === 1)).toMatchObject({ stalls: "gateway-link", worker: 2, delayMs: 900, directions: "both" });
    // A delay on the store link is inside the store's deadline.
    expect(starts.find((e) => e.fault === 2)?.stalls).toBeUndefined();
    expect(starts.find((e) => e.fault === 3)).toMatchObject({ stalls: "gateway" });
  });
});
