import { performance, type EventLoopUtilization } from "node:perf_hooks";

/** How often the timer looks. */
const TICK_MS = 10;
/** The weight of each new lateness in the average: about the last ten ticks (~100 ms of a loop keeping up). */
const WEIGHT = 0.1;
/**
 * The utilization is averaged over about this long, by time: one long tick counts for its whole
 * length. Long beside a scheduler's time slices: a process paused while a callback runs counts the
 * pause as work, and a loop that mostly waits is paused there now and then. So a loop that starts
 * working all the time reads 0.8 after about 1.6 s (1 − e^−1.6).
 */
const UTILIZATION_WINDOW_MS = 1_000;

/**
 * How late the event loop runs, and how much of its time it spends working: a timer due every
 * TICK_MS, the average of how late it fired, and the share of the time since that the loop was not
 * waiting for I/O (Node's event loop utilization). A gateway whose loop is late by tens of
 * milliseconds on average while it works nearly all the time has more work than it can do: every
 * request it accepts waits that long before each of its steps. A loop that is late while it mostly
 * waits is not short of work but of a CPU (another process has it): taking fewer requests would not
 * help it. One long pause (a GC, a machine busy for a moment) moves the lateness for about a tenth of
 * a second. Unref'd: it never keeps a process up.
 */
export class LoopDelay {
  #average = 0;
  #utilization = 0;
  #last = performance.now();
  #elu: EventLoopUtilization = performance.eventLoopUtilization();
  readonly #timer: NodeJS.Timeout;

  constructor() {
    this.#timer = setInterval(() => {
      const now = performance.now();
      const elapsed = now - this.#last;
      this.#last = now;
      this.#average += (Math.max(0, elapsed - TICK_MS) - this.#average) * WEIGHT;
      const elu = performance.eventLoopUtilization();
      const tick = performance.eventLoopUtilization(elu, this.#elu);
      this.#elu = elu;
      // A tick with no time in it (never seen: active ÷ (idle + active) is NaN) must not poison the average.
      if (Number.isFinite(tick.utilization))
        this.#utilization += (tick.utilization - this.#utilization) * (1 - Math.exp(-elapsed / UTILIZATION_WINDOW_MS));
    }, TICK_MS).unref();
  }

  /** Milliseconds: the recent average lateness of the loop. */
  get ms(): number {
    return this.#average;
  }

  /** 0 to 1: the recent share of the loop's time spent running callbacks, not waiting for I/O. */
  get utilization(): number {
    return this.#utilization;
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}
