import { performance, type EventLoopUtilization } from "node:perf_hooks";

/** How often the timer looks. */
const TICK_MS = 10;
/** The weight of each new lateness in the average: about the last ten ticks (~100 ms of a loop keeping up). */
const WEIGHT = 0.1;
/**
 * The utilization is averaged over about this much of the loop's own time (working or waiting for
 * I/O; time it is stopped or waits for a CPU in the middle of its work is in neither): so a loop that
 * starts working all the time reads 0.8 after about 1.6 s of its own time (1 − e^−1.6) — longer by
 * the clock when it gets only part of a CPU (a quarter: about 6.4 s).
 */
const UTILIZATION_WINDOW_MS = 1_000;

/** This thread's CPU time in µs: Node's from 22.19; before it, the process's (its other threads — the GC's, libuv's pool — add a little). */
const cpuUsage: () => NodeJS.CpuUsage =
  typeof process.threadCpuUsage === "function" ? () => process.threadCpuUsage() : () => process.cpuUsage();

/**
 * How late the event loop runs, and how much of its time it spends working: a timer due every
 * TICK_MS, the average of how late it fired, and the share of the loop's time that it ran on a CPU
 * rather than waited for I/O. A gateway whose loop is late by tens of milliseconds on average while
 * it works nearly all the time has more work than it can do: every request it accepts waits that
 * long before each of its steps. A loop that is late while it mostly waits is not short of work but
 * of a CPU (another process has it): taking fewer requests would not help it. One long pause (a GC,
 * a machine busy for a moment) moves the lateness for about a tenth of a second. Unref'd: it never
 * keeps a process up.
 *
 * Working is this thread's CPU time, not Node's event loop utilization (the wall time outside the
 * wait for I/O): a process the scheduler sets aside while a callback runs — a busy host's other
 * processes have the CPU — has that time counted as work by Node's, and a loop that mostly waits
 * was read as working on such a host (a client sending one request at a time was refused).
 */
export class LoopDelay {
  #average = 0;
  #utilization = 0;
  #last = performance.now();
  #elu: EventLoopUtilization = performance.eventLoopUtilization();
  #cpu = cpuUsage();
  readonly #timer: NodeJS.Timeout;
  readonly #windowMs: number;

  /** `windowMs`: how much of the loop's own time the utilization is averaged over. */
  constructor(windowMs = UTILIZATION_WINDOW_MS) {
    this.#windowMs = windowMs;
    this.#timer = setInterval(() => {
      const now = performance.now();
      const elapsed = now - this.#last;
      this.#last = now;
      this.#average += (Math.max(0, elapsed - TICK_MS) - this.#average) * WEIGHT;
      this.#measure();
    }, TICK_MS).unref();
  }

  /** Milliseconds: the recent average lateness of the loop. */
  get ms(): number {
    return this.#average;
  }

  /** 0 to 1: the recent share of the loop's time spent running on a CPU, not waiting for I/O. */
  get utilization(): number {
    return this.#utilization;
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  /** Adds the time since the last tick to the utilization's average: worked (CPU) ÷ (worked + waited for I/O), weighted by that time. */
  #measure(): void {
    const elu = performance.eventLoopUtilization();
    const waited = performance.eventLoopUtilization(elu, this.#elu).idle;
    const cpu = cpuUsage();
    const worked = (cpu.user - this.#cpu.user + cpu.system - this.#cpu.system) / 1000;
    this.#elu = elu;
    this.#cpu = cpu;
    const time = worked + waited;
    // A tick with no time in it must not poison the average (0 ÷ 0).
    if (time > 0) this.#utilization += (worked / time - this.#utilization) * (1 - Math.exp(-time / this.#windowMs));
  }
}
