import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { HistoryEvent } from "./history.js";
import { scheduleCoverageMs, type ScheduleOptions } from "./nemesis.js";
import { RunEnd } from "./run-end.js";

const schedule: ScheduleOptions = { seed: 1, ttlMs: 600, workers: 5, redisNodes: 5, clockNode: 0, store: "s3" };
const [minMs, maxMs] = [scheduleCoverageMs(schedule), scheduleCoverageMs(schedule, 3)];

let clock = 0;
const acquired = (token: number, holder: string): HistoryEvent => ({
  type: "acquired",
  op: `0.${holder}`,
  worker: 0,
  resource: "chaos-0",
  token: String(token),
  holder,
  mono: clock,
  wall: 0,
});

describe("when a run ends", () => {
  beforeEach(() => {
    vi.useFakeTimers();
    clock = 0;
  });
  afterEach(() => vi.useRealTimers());

  /** Advances the run's clock and the timers together. */
  const advanceTo = (ms: number): void => {
    const by = ms - clock;
    clock = ms;
    vi.advanceTimersByTime(by);
  };
  const start = (pairs = false): { end: RunEnd; finished: () => boolean } => {
    let finished = false;
    const end = new RunEnd(
      schedule,
      pairs,
      () => clock,
      () => (finished = true),
    );
    return { end, finished: () => finished };
  };

  it("not before the first wipe round has played out, however soon the operations are done", () => {
    const { end, finished } = start();
    end.event(acquired(1, "a"));
    end.event(acquired(1, "b")); // a repeated token, early
    end.opsDone();
    advanceTo(minMs - 1);
    expect(finished()).toBe(false);
    advanceTo(minMs);
    expect(finished()).toBe(true);
  });

  it("after it, at the first repeated token the acquisitions show; without one, at the third round's end", () => {
    const shows = start();
    shows.end.event(acquired(1, "a"));
    shows.end.opsDone();
    advanceTo(minMs + 500);
    expect(shows.finished()).toBe(false);
    shows.end.event(acquired(2, "b"));
    expect(shows.finished()).toBe(false);
    shows.end.event(acquired(2, "c"));
    expect(shows.finished()).toBe(true);

    clock = 0;
    const never = start();
    never.end.event(acquired(5, "a"));
    never.end.opsDone();
    advanceTo(maxMs - 1);
    expect(never.finished()).toBe(false);
    advanceTo(maxMs);
    expect(never.finished()).toBe(true);
  });

  it("with pairs, a token below one handed out shows the round too", () => {
    for (const pairs of [false, true]) {
      clock = 0;
      const { end, finished } = start(pairs);
      end.event(acquired(9, "a"));
      end.opsDone();
      advanceTo(minMs);
      end.event(acquired(4, "b"));
      expect(finished()).toBe(pairs);
    }
  });

  it("a timer that fires before the run's clock has reached its moment checks again", () => {
    const { end, finished } = start();
    end.event(acquired(1, "a"));
    end.event(acquired(1, "b"));
    end.opsDone();
    // The run's clock trails the timers by 5 ms.
    clock = minMs - 5;
    vi.advanceTimersByTime(minMs);
    expect(finished()).toBe(false);
    clock = minMs;
    vi.advanceTimersByTime(5);
    expect(finished()).toBe(true);
  });

  it("never while operations are still running", () => {
    const { end, finished } = start();
    advanceTo(maxMs + 10_000);
    expect(end.latestMs).toBe(maxMs);
    end.event(acquired(1, "a"));
    end.event(acquired(1, "b"));
    expect(finished()).toBe(false);
    end.opsDone();
    expect(finished()).toBe(true);
  });
});
