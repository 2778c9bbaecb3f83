import { describe, expect, it } from "vitest";
import { Backlog, loopState } from "./backlog.js";
import { FairShare } from "./fair-share.js";
import { Lateness } from "./loop-delay.js";

/**
 * The overload signal under a throttled clock, with no servers: a process under a CPU quota of a
 * quarter of a core (25 ms of each 100 ms period; CFS throttling stops it for the other 75) whose
 * event loop works all the time it runs, serving a closed loop of 64 clients — its backlog flat at
 * 64, never more than it carries. Read as lateness, the throttled time made the gateway refuse
 * nearly every write of such a load (the storm, docs/benchmarks.md); it is no overload.
 */
const TARGET_MS = 25;
const OWN_WORK = 0.8;
const PERIOD_MS = 100;
const RUN_MS = 25;
/** A backlog with a standing queue, with work in it. */
const QUEUEING = { queueing: true, empty: false } as const;

/** The ticks of a 10 ms timer on that process, as `[ms since the last tick, ms of it throttled]`, for `periods` periods. */
function throttledTicks(periods: number): [number, number][] {
  const ticks: [number, number][] = [];
  for (let p = 0; p < periods; p++) {
    // Running: ticks 10 ms apart, a little late (the loop is busy: 2 ms of callbacks before each fires).
    ticks.push([12, 0], [12, 0]);
    // Then throttled to the period's end: the next tick fires once the process runs again.
    ticks.push([PERIOD_MS - 24, PERIOD_MS - RUN_MS]);
  }
  return ticks;
}

describe("the overload signal", () => {
  it("does not read a CPU quota's throttled time as lateness (the same ticks read raw are far past the target)", () => {
    const net = new Lateness();
    const raw = new Lateness();
    for (const [elapsed, throttled] of throttledTicks(20)) {
      net.tick(elapsed, throttled);
      raw.tick(elapsed, 0);
    }
    // The condition: as the loop's lateness was read before (no throttled time taken out), past the target.
    expect(raw.ms).toBeGreaterThan(TARGET_MS);
    expect(net.ms).toBeLessThan(TARGET_MS / 5);
    expect(net.standingMs).toBeLessThan(TARGET_MS / 5);
    // A call's time still grows by it: the limits' gradient does not learn from such calls.
    expect(net.rawMs).toBe(raw.ms);
  });

  it("reads a loop late on its own work as late", () => {
    const late = new Lateness();
    for (let i = 0; i < 60; i++) late.tick(60, 0);
    expect(late.ms).toBeGreaterThan(TARGET_MS);
    expect(late.standingMs).toBe(50);
  });

  it("reads a loop that catches up now and then as not standing late, whatever its average", () => {
    const bursty = new Lateness();
    // A turn of 90 ms of callbacks, then one on time: late on average, never at every tick.
    for (let i = 0; i < 60; i++) bursty.tick(i % 2 === 0 ? 100 : 10, 0);
    expect(bursty.ms).toBeGreaterThan(TARGET_MS);
    expect(bursty.standingMs).toBe(0);
  });

  it("sees a queue that stands, not a backlog that stays flat however large, nor one the limits take in", () => {
    const flat = new Backlog();
    const filling = new Backlog();
    const queued = new Backlog();
    let seen = { flat: false, filling: false };
    let missed = 0;
    for (let t = 0; t < 2_000; t++) {
      // 64 in flight, dipping as answers go out and the next requests come in.
      flat.observe(t, 60 + (t % 5), 0);
      // Growing by 1 a ms up to the limit: each is let run at once (the queue's turn comes at the limit).
      filling.observe(t, 64 + Math.min(t, 440), 0);
      // At the limit, with requests waiting for a slot all the time.
      queued.observe(t, 520, 8 + (t % 3));
      seen = { flat: seen.flat || flat.queueing, filling: seen.filling || filling.queueing };
      if (t >= 100 && !queued.queueing) missed++;
      if (t === 99 && queued.queueing) missed++;
    }
    expect({ ...seen, missed }).toEqual({ flat: false, filling: false, missed: 0 });
  });

  it("reads a queue that comes and goes within each interval as no standing queue", () => {
    const backlog = new Backlog();
    let seen = false;
    // At the limit, requests waiting for a slot half of each 20 ms and none the other half: the limits catch up every time.
    for (let t = 0; t < 2_000; t++) {
      backlog.observe(t, 520, (t + 5) % 20 < 10 ? 5 : 0);
      seen ||= backlog.queueing;
    }
    expect(seen).toBe(false);
  });

  it("reads a queue seen before a gap of two intervals with nothing observed as saying nothing of now", () => {
    const backlog = new Backlog();
    for (let t = 0; t < 300; t += 10) backlog.observe(t, 520, 8);
    const before = backlog.queueing;
    // Nothing judged for 240 ms (two intervals and more from the last one's start), then one request
    // with a queue: a queue seen before the gap is not taken to have stood through it.
    backlog.observe(540, 520, 8);
    expect({ before, after: backlog.queueing }).toEqual({ before: true, after: false });
  });

  it("does not read a closed loop's backlog refilling after a stall under a quota as a queue", () => {
    // quota.test.ts's on-gateway, 64 clients at a quarter of a core, in a round it refused 52 writes
    // in: its interval minima 32, 32, 32, 28, nothing observed for 300 ms (throttled, and a turn of the
    // loop spanning periods), then 32, 34, 36, 40 — read as growth (three rises, by more than a tenth
    // and four), and with one late tick as behind. Nothing waited for a slot: its limit was 512.
    const backlog = new Backlog();
    const minima = [32, 32, 32, 28, undefined, undefined, undefined, 32, 34, 36, 40, 40];
    let queueing = false;
    for (const [i, min] of minima.entries()) {
      if (min === undefined) continue;
      for (let t = i * 100; t < (i + 1) * 100; t += 10) backlog.observe(t, min + (t % 30 === 0 ? 0 : 5), 0);
      queueing ||= backlog.queueing;
    }
    expect(queueing).toBe(false);
  });

  it("holds nobody back while a throttled loop serves a closed loop (its backlog flat), and binds once a queue stands", () => {
    const late = { standingMs: 4 * TARGET_MS, utilization: 1 };
    const share = new FairShare();
    const backlog = new Backlog();
    // Five seconds of one key's closed loop at 900 requests a second: the loop, even read late, and working.
    let refused = 0;
    for (let i = 0; i < 4_500; i++) {
      const now = i / 0.9;
      backlog.observe(now, 60 + (i % 5), 0);
      share.adjust(now, loopState(late, backlog, TARGET_MS, OWN_WORK));
      if (!share.admit("key", 1, now, (i * 0.618) % 1)) refused++;
    }
    expect({ refused, share: share.share }).toEqual({ refused: 0, share: Infinity });
    // The same, as the loop was read before (late and working was behind, whatever the backlog): it binds.
    const before = new FairShare();
    for (let i = 0; i < 4_500; i++) before.adjust(i / 0.9, loopState(late, QUEUEING, TARGET_MS, OWN_WORK));
    expect(before.share).toBeLessThan(Infinity);
    // An open loop past capacity: at the limit, requests wait for a slot while the loop is late: the share binds.
    const open = new Backlog();
    for (let i = 0; i < 1_000; i++) {
      open.observe(i, 512 + Math.min(i, 256), Math.min(i, 256));
      share.adjust(i + 5_000, loopState(late, open, TARGET_MS, OWN_WORK));
      share.admit("key", 1, i + 5_000, 0.5);
    }
    expect(share.share).toBeLessThan(Infinity);
  });

  it("lets every key in again once the loop is on time with nothing admitted unanswered, and not while it is late", () => {
    const late = { standingMs: 4 * TARGET_MS, utilization: 1 };
    const onTime = { standingMs: TARGET_MS / 4, utilization: 1 };
    const share = new FairShare();
    const backlog = new Backlog();
    // One key at 900 requests a second while its requests wait for a slot, one more every 10 ms, and
    // the loop reads late: behind once the queue has stood for an interval, the share binds it.
    let now = 0;
    for (; now < 600; now += 1 / 0.9) {
      const queued = 1 + Math.floor(now / 10);
      backlog.observe(now, 512 + queued, queued);
      share.adjust(now, loopState(late, backlog, TARGET_MS, OWN_WORK));
      share.admit("key", 1, now, 0.5);
    }
    const cut = share.share;
    expect({ queueing: backlog.queueing, cut: cut < 900 }).toEqual({ queueing: true, cut: true });
    // Its connections parked (parking.ts), its work drains: the next request read finds nothing
    // admitted, under 50 ms after the share was last cut. Still late, the loop may be behind on work
    // the backlog does not count: the share stays, and an empty backlog is not read as a queue.
    backlog.observe(now, 0, 0);
    expect(loopState(late, backlog, TARGET_MS, OWN_WORK)).toBe("keeping-up");
    // On time, it binds nobody at once: grown back step by step, it stayed under the key's rate, and
    // each connection read again was refused again (the storm of quota.test.ts).
    expect(loopState(onTime, backlog, TARGET_MS, OWN_WORK)).toBe("idle");
    share.adjust(now, loopState(onTime, backlog, TARGET_MS, OWN_WORK));
    expect({ cut, share: share.share }).toEqual({ cut, share: Infinity });
    expect(share.admit("key", 1, now, 0.999)).toBe(true);
    // The first request admitted again, the loop late: keeping up, no queue standing.
    backlog.observe(now + 1, 1, 0);
    share.adjust(now + 1, loopState(late, backlog, TARGET_MS, OWN_WORK));
    expect(share.share).toBe(Infinity);
  });

  it("reads neither a loop on time nor one short of a CPU (working under 0.8 of its time) as behind", () => {
    expect(loopState({ standingMs: TARGET_MS / 2, utilization: 1 }, QUEUEING, TARGET_MS, OWN_WORK)).toBe("keeping-up");
    expect(loopState({ standingMs: 4 * TARGET_MS, utilization: 0.5 }, QUEUEING, TARGET_MS, OWN_WORK)).toBe("keeping-up");
    expect(loopState({ standingMs: 4 * TARGET_MS, utilization: 1 }, QUEUEING, TARGET_MS, OWN_WORK)).toBe("behind");
  });
});
