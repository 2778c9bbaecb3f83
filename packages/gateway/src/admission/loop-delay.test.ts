import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { setImmediate as turn, setTimeout as delay } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { LoopDelay } from "./loop-delay.js";

/** Blocks this thread for `ms` inside a callback without using a CPU: as a process the scheduler sets aside while it runs one. */
const setAside = (ms: number): void => void Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
const spin = (ms: number): void => {
  for (const until = performance.now() + ms; performance.now() < until;);
};
/** Runs `cycle` for `ms`. */
async function run(ms: number, cycle: () => Promise<void> | void): Promise<void> {
  for (const until = performance.now() + ms; performance.now() < until;) await cycle();
}
/** A loop that works all the time: 9 ms of callbacks, then a turn of the loop (its timer runs; it waits for no I/O). */
const working = async (): Promise<void> => {
  spin(9);
  await turn();
};

// The utilization averaged over 50 ms of the loop's own time (the gateway's: 1 s), so that each
// phase below, about a second, moves it most of the way to what that phase reads.
const WINDOW_MS = 50;

/** Runs `then` on a loop measured from a second of working all the time, which reads as working. */
async function fromWorking(then: (loop: LoopDelay) => Promise<void>): Promise<void> {
  const loop = new LoopDelay(WINDOW_MS);
  try {
    await run(1_000, working);
    expect(loop.utilization).toBeGreaterThan(0.8);
    await then(loop);
  } finally {
    loop.stop();
  }
}

describe("LoopDelay", () => {
  it("reads a loop that runs callbacks all the time as working, one that mostly waits as not", async () => {
    await fromWorking(async (loop) => {
      await run(1_000, async () => {
        spin(1);
        await delay(9);
      });
      expect(loop.utilization).toBeLessThan(0.5);
    });
  });

  /**
   * A loop measured with a counter of its waits that stalls the thread inside one read, and counts
   * the stall as waited, as the kernel's counters do: read `ms` after that read.
   */
  async function stalledInRead(stallAt: number): Promise<{ ms: number; rawMs: number; standingMs: number }> {
    const STALL_MS = 1_000;
    let reads = 0;
    let waited = 0;
    const counter = (): number => {
      if (reads++ === stallAt) {
        setAside(STALL_MS);
        waited += STALL_MS;
      }
      return waited;
    };
    const loop = new LoopDelay(WINDOW_MS, [counter]);
    try {
      // A counter is read only after a late tick: make the first one late, by a wait the counter counts.
      setAside(30);
      waited += 30;
      // Timers run in the order they are due: the loop's first two ticks have run by the time this one does.
      await delay(50);
      return { ms: loop.ms, rawMs: loop.rawMs, standingMs: loop.standingMs };
    } finally {
      loop.stop();
    }
  }

  it("starts each tick's time once the counters of its waits are read: a stall while they are read is not lateness", async () => {
    // Counted from before the read, the stall was a tick's lateness with none of it taken out: the
    // averages read at least 0.1 × 990 × 0.9⁴ ≈ 65 ms after the ticks that may follow it, and the
    // standing lateness all of it. A tick ~300 ms late for real would be needed to reach 30.
    for (const [stallAt, which] of [
      [0, "the read before the first tick"],
      [1, "the read after a late tick"],
    ] as const) {
      const seen = await stalledInRead(stallAt);
      for (const [name, ms] of Object.entries(seen)) expect(ms, `${which}: ${name} ${JSON.stringify(seen)}`).toBeLessThan(30);
    }
  });

  it("reads a loop set aside while its callbacks run (another process has the CPU) as late, not as working", async () => {
    await fromWorking(async (loop) => {
      // Each cycle: 5 ms waiting for I/O, 1 ms of work, then 60 ms set aside inside that callback.
      // Node's event loop utilization counts the time set aside as work: 61 ÷ 66, ~0.9.
      await run(1_500, async () => {
        await delay(5);
        spin(1);
        setAside(60);
      });
      const seen = JSON.stringify({ ms: loop.ms, utilization: loop.utilization });
      expect(loop.ms, seen).toBeGreaterThan(25);
      expect(loop.utilization, seen).toBeLessThan(0.5);
    });
  });
});

/**
 * A loop that mostly waits, measured in a child process on the same CPU as a process that spins:
 * once started, the child lowers its loop's thread to the lowest priority (nice 19), so that,
 * runnable, it waits in the run queue for most of each tick, as a gateway beside a busy neighbour
 * does. Its timer is as late as the wait, and none of that lateness is its own.
 */
/** Under the test's own timeout (HOG_TEST_TIMEOUT_MS): the child at nice 19 has taken up to 48 s from its start beside the hog. */
const CHILD_DEADLINE_MS = 110_000;
const HOG_TEST_TIMEOUT_MS = 120_000;

async function besideAHog(): Promise<{ ms: number; rawMs: number; utilization: number }> {
  const source = fileURLToPath(new URL("./loop-delay.ts", import.meta.url));
  const measure = `
    import { once } from "node:events";
    import { setPriority } from "node:os";
    import { setTimeout as delay } from "node:timers/promises";
    const { LoopDelay } = await import(${JSON.stringify(source)});
    console.log("ready");
    await once(process.stdin, "data");
    setPriority(19);
    const loop = new LoopDelay(50);
    for (const until = performance.now() + 1500; performance.now() < until;) {
      for (const busy = performance.now() + 1; performance.now() < busy;);
      await delay(9);
    }
    console.log(JSON.stringify({ ms: loop.ms, rawMs: loop.rawMs, utilization: loop.utilization }));
    loop.stop();
    process.exit(0);`;
  const processes: ChildProcess[] = [];
  let out = "";
  // Bounded under the test's timeout from the child's start, so that the processes are killed below
  // whatever happens: a test that times out does not stop its function, and a hog left spinning
  // slows everything after it.
  let deadline: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    deadline = setTimeout(
      () => reject(new Error(`the child at nice 19 did not finish its 1.5 s loop in ${CHILD_DEADLINE_MS} ms: ${out}`)),
      CHILD_DEADLINE_MS,
    );
  });
  try {
    const child = spawn("taskset", ["-c", "0", process.execPath, "--import", "tsx", "--input-type=module", "-e", measure], {
      stdio: ["pipe", "pipe", "inherit"],
      cwd: fileURLToPath(new URL("../../../../", import.meta.url)),
    });
    processes.push(child);
    const ready = new Promise<void>((resolve) =>
      child.stdout?.on("data", (d: Buffer) => {
        out += d.toString();
        if (out.startsWith("ready\n")) resolve();
      }),
    );
    const exited = once(child, "exit") as Promise<[number | null]>;
    await Promise.race([ready, exited, late]);
    expect(out.startsWith("ready\n"), out).toBe(true);
    processes.push(spawn("taskset", ["-c", "0", "sh", "-c", "while :; do :; done"], { stdio: "ignore" }));
    child.stdin?.write("go\n");
    const [code] = await Promise.race([exited, late]);
    expect(code, out).toBe(0);
    return JSON.parse(out.slice("ready\n".length)) as { ms: number; rawMs: number; utilization: number };
  } finally {
    clearTimeout(deadline);
    for (const p of processes) p.kill("SIGKILL");
  }
}

describe("LoopDelay beside a process that has the CPU", () => {
  it(
    "takes the loop's wait in the run queue out of its lateness",
    async () => {
      const seen = await besideAHog();
      // The condition: the wait happened (the timer ran later than admission's default target, 25 ms).
      expect(seen.rawMs, JSON.stringify(seen)).toBeGreaterThan(25);
      // Read as the loop's own, it made admission refuse a closed loop of clients on a busy machine.
      // Taken out, what is left is under that target, and a small part of the raw lateness (measured:
      // under 5 ms of 79 alone, 6.6 ms of 75 beside the whole suite; the old reading kept all 79).
      // Beside two more hogs and a chaos run: 0 of 24 over either bound, 6 of 24 while the loop's time
      // started before its counters were first read (the stall test above).
      expect(seen.ms, JSON.stringify(seen)).toBeLessThan(25);
      expect(seen.ms, JSON.stringify(seen)).toBeLessThan(seen.rawMs / 4);
    },
    HOG_TEST_TIMEOUT_MS,
  );
});
