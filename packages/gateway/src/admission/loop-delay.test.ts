import { performance } from "node:perf_hooks";
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
