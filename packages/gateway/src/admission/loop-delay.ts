import { closeSync, openSync, readFileSync, readSync } from "node:fs";
import { performance, type EventLoopUtilization } from "node:perf_hooks";

/** How often the timer looks. */
const TICK_MS = 10;
/** The standing lateness is the least over this long (CoDel's interval). */
const STANDING_INTERVAL_MS = 100;
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
 * The average lateness of a timer due every TICK_MS, less the time the loop's thread was not given a
 * CPU: its cgroup's CFS throttling (a container's CPU limit stops every thread once the quota of a
 * period is used — up to half a period at half a core), and its wait in the run queue while another
 * process had the CPU. That time is not the loop's own backlog: refusing requests would not give it
 * back. Read as lateness, the throttling made the gateway refuse nearly every write of 64
 * closed-loop clients it carried well (a storm that kept itself going: docs/benchmarks.md), and a
 * busy neighbour's CPU made it refuse a few of them. Pure: the caller passes each tick's interval
 * and the time in it the thread waited for a CPU.
 */
export class Lateness {
  #average = 0;
  #raw = 0;
  #standing = 0;
  #interval = { elapsed: 0, min: Infinity };

  /** Milliseconds: the recent average lateness, the wait for a CPU taken out. */
  get ms(): number {
    return this.#average;
  }

  /**
   * Milliseconds: the recent average lateness with the wait for a CPU in it: how much later than the
   * clock says the loop's callbacks ran, whatever stopped them — a call's time grows by it too.
   */
  get rawMs(): number {
    return this.#raw;
  }

  /**
   * Milliseconds: the least lateness of any tick over the last STANDING_INTERVAL_MS, the wait for a
   * CPU taken out — as CoDel reads a queue's delay: a loop with work waiting all the time is late at
   * every tick; one that catches up now and then (a closed loop of clients, a burst) is not.
   */
  get standingMs(): number {
    return this.#standing;
  }

  /** A tick `elapsedMs` after the last one, `waitedMs` of which the thread waited for a CPU. */
  tick(elapsedMs: number, waitedMs: number): void {
    const late = Math.max(0, elapsedMs - TICK_MS - Math.max(0, waitedMs));
    this.#average += (late - this.#average) * WEIGHT;
    this.#raw += (Math.max(0, elapsedMs - TICK_MS) - this.#raw) * WEIGHT;
    const interval = this.#interval;
    interval.min = Math.min(interval.min, late);
    interval.elapsed += elapsedMs;
    if (interval.elapsed < STANDING_INTERVAL_MS) return;
    this.#standing = interval.min;
    this.#interval = { elapsed: 0, min: Infinity };
  }
}

/** kernelFile()'s readers by path, for this thread (a worker has its own module, and so its own). */
const kernelFiles = new Map<string, (() => string) | undefined>();

/**
 * A small file the kernel writes as it is read (/proc, a cgroup's cpu.stat), read again after every
 * late tick: opened once, then each read is one pread from its start, where readFileSync would open,
 * stat, read and close it (1.4 against 5.3 µs a read here). Undefined when it cannot be opened. One
 * descriptor a path, open for the thread's life, shared by every LoopDelay: cpuWaits()' two paths
 * are fixed, and "thread-self" is the opening thread's, the one every timer here runs on.
 */
function kernelFile(path: string): (() => string) | undefined {
  if (kernelFiles.has(path)) return kernelFiles.get(path);
  let reader: (() => string) | undefined;
  try {
    const fd = openSync(path, "r");
    // Closed when the thread exits: descriptors are the process's, and a worker thread's would outlive it.
    process.once("exit", () => closeSync(fd));
    const buffer = Buffer.alloc(4096);
    reader = () => buffer.toString("latin1", 0, readSync(fd, buffer, 0, buffer.length, 0));
  } catch {
    reader = undefined;
  }
  kernelFiles.set(path, reader);
  return reader;
}

/**
 * The process's cgroup's throttled time so far in ms (cgroup v1 `cpu.stat` throttled_time, v2
 * throttled_usec), or undefined when it has no CPU cgroup to read.
 */
function cgroupThrottle(procCgroup = "/proc/self/cgroup", root = "/sys/fs/cgroup"): (() => number) | undefined {
  let lines: string[];
  try {
    lines = readFileSync(procCgroup, "utf8").trim().split("\n");
  } catch {
    return undefined;
  }
  const candidates: { file: string; field: RegExp; toMs: number }[] = [];
  for (const line of lines) {
    const [, controllers = "", path = "/"] = line.split(":");
    if (controllers.split(",").includes("cpu"))
      candidates.push({ file: `${root}/${controllers}${path}/cpu.stat`, field: /^throttled_time (\d+)$/m, toMs: 1e-6 });
    if (controllers === "") candidates.push({ file: `${root}${path}/cpu.stat`, field: /^throttled_usec (\d+)$/m, toMs: 1e-3 });
  }
  for (const c of candidates) {
    const text = kernelFile(c.file);
    if (text === undefined) continue;
    const read = (): number | undefined => {
      try {
        const m = c.field.exec(text());
        return m === null ? undefined : Number(m[1]) * c.toMs;
      } catch {
        return undefined;
      }
    };
    if (read() !== undefined) return () => read() ?? 0;
  }
  return undefined;
}

/**
 * This thread's time so far in ms spent runnable but waiting for a CPU (Linux's schedstat
 * run_delay: another process had the CPU, or its cgroup was throttled — measured here, a thread in
 * a cgroup at a quarter of a core waited 2,251 ms in 3 s against 2,249 ms throttled), or undefined
 * where the kernel does not keep it. Read on the thread the timer runs on: the event loop's.
 */
function runQueueWait(file = "/proc/thread-self/schedstat"): (() => number) | undefined {
  const text = kernelFile(file);
  if (text === undefined) return undefined;
  const read = (): number | undefined => {
    try {
      const waited = Number(text().split(" ")[1]);
      return Number.isFinite(waited) ? waited / 1e6 : undefined;
    } catch {
      return undefined;
    }
  };
  return read() === undefined ? undefined : () => read() ?? 0;
}

/**
 * Each counter this system keeps of the time the loop's thread was not given a CPU (ms so far):
 * its cgroup's throttling, and its own wait in the run queue, which holds the throttling too where
 * the kernel keeps it. A tick takes out the most any of them grew by, never their sum: where both
 * count the same time, it is taken out once.
 */
function cpuWaits(): readonly (() => number)[] {
  return [cgroupThrottle(), runQueueWait()].filter((read) => read !== undefined);
}

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
  readonly #lateness = new Lateness();
  #utilization = 0;
  #last: number;
  #elu: EventLoopUtilization = performance.eventLoopUtilization();
  #cpu = cpuUsage();
  readonly #timer: NodeJS.Timeout;
  readonly #windowMs: number;

  /**
   * `windowMs`: how much of the loop's own time the utilization is averaged over; `waits`: counters
   * of the time the thread was not given a CPU so far (ms), read only after a late tick (cpuWaits()).
   */
  constructor(windowMs = UTILIZATION_WINDOW_MS, waits: readonly (() => number)[] = cpuWaits()) {
    this.#windowMs = windowMs;
    let before = waits.map((read) => read());
    // A tick's time starts after the counters are read, never before: a wait between the two would
    // be in the next tick's time and not in what it takes out, so the loop would read as late by it
    // (a loop at nice 19 beside a busy CPU waited 1.2 s right there, before its first tick, and read
    // as 123 ms late at the end of its 1.5 s). Stamped after, a wait during a read is taken out of a
    // tick whose time does not hold it: the loop can read as less late than it was, never as more.
    this.#last = performance.now();
    this.#timer = setInterval(() => {
      const now = performance.now();
      const elapsed = now - this.#last;
      this.#last = now;
      // An on-time tick had no wait for a CPU worth taking out; only a late one costs the reads.
      let taken = 0;
      if (waits.length > 0 && elapsed > TICK_MS + 1) {
        const after = waits.map((read) => read());
        for (const [i, ms] of after.entries()) taken = Math.max(taken, ms - (before[i] as number));
        before = after;
        this.#last = performance.now();
      }
      this.#lateness.tick(elapsed, taken);
      this.#measure();
    }, TICK_MS).unref();
  }

  /** Milliseconds: the recent average lateness of the loop, less the time its thread waited for a CPU. */
  get ms(): number {
    return this.#lateness.ms;
  }

  /** Milliseconds: the recent average lateness of the loop, the time its thread waited for a CPU included. */
  get rawMs(): number {
    return this.#lateness.rawMs;
  }

  /** Milliseconds: the loop's least lateness over the last 100 ms, less the time its thread waited for a CPU. */
  get standingMs(): number {
    return this.#lateness.standingMs;
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
