import { performance } from "node:perf_hooks";

/** How often the timer looks. */
const TICK_MS = 10;
/** The weight of each new lateness in the average: about the last ten ticks (~100 ms of a loop keeping up). */
const WEIGHT = 0.1;

/**
 * How late the event loop runs: a timer due every TICK_MS, and the average of how late it fired. A
 * gateway whose loop is late by tens of milliseconds on average has more work than it can do: every
 * request it accepts waits that long before each of its steps. One long pause (a GC, a machine busy
 * for a moment) moves the average for about a tenth of a second. Unref'd: it never keeps a process up.
 */
export class LoopDelay {
  #average = 0;
  #last = performance.now();
  readonly #timer: NodeJS.Timeout;

  constructor() {
    this.#timer = setInterval(() => {
      const now = performance.now();
      const late = Math.max(0, now - this.#last - TICK_MS);
      this.#last = now;
      this.#average += (late - this.#average) * WEIGHT;
    }, TICK_MS).unref();
  }

  /** Milliseconds: the recent average lateness of the loop. */
  get ms(): number {
    return this.#average;
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}
