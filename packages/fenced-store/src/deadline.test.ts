import { describe, expect, it } from "vitest";
import { Deadline, DeadlineExceeded } from "./deadline.js";

/** A promise that never settles: a wait only the deadline ends. */
const never = (): Promise<never> => new Promise<never>(() => undefined);

describe("Deadline: its signal, made when first asked for, says what the call's other readers say", () => {
  it("a caller's signal aborted before the call: the signal asked afterwards is aborted, with the caller's reason", async () => {
    const caller = new AbortController();
    const reason = new Error("the caller gave up");
    caller.abort(reason);
    const deadline = new Deadline(60_000, caller.signal);
    expect(deadline.callerAborted).toBe(true);
    expect(deadline.signal.aborted).toBe(true);
    expect(deadline.signal.reason).toBe(reason);
    await expect(deadline.race(never())).rejects.toBe(reason);
    deadline.end();
  });

  it("past the deadline before anyone asked: the signal is aborted with DeadlineExceeded, and every race rejects with it", async () => {
    const deadline = new Deadline(1, undefined);
    const first = await deadline.race(never()).catch((err: unknown) => err);
    expect(first).toBeInstanceOf(DeadlineExceeded);
    expect(deadline.timedOut).toBe(true);
    expect(deadline.signal.aborted).toBe(true);
    expect(deadline.signal.reason).toBe(first);
    await expect(deadline.race(Promise.resolve(1))).rejects.toBe(first);
  });

  it("asked for first, the signal aborts when the caller's does, and the deadline has not passed", async () => {
    const caller = new AbortController();
    const deadline = new Deadline(60_000, caller.signal);
    const signal = deadline.signal;
    expect(signal.aborted).toBe(false);
    const racing = deadline.race(never());
    caller.abort(new Error("later"));
    await expect(racing).rejects.toThrow("later");
    expect(signal.aborted).toBe(true);
    expect(deadline.timedOut).toBe(false);
    deadline.end();
  });

  it("the first reason to stop is the one kept: a timeout then end(true) is still a timeout, a caller's abort then the deadline still the caller's", async () => {
    const timed = new Deadline(1, undefined);
    const exceeded = await timed.race(never()).catch((err: unknown) => err);
    timed.end(true);
    expect(timed.timedOut).toBe(true);
    await expect(timed.race(never())).rejects.toBe(exceeded);
    const caller = new AbortController();
    const reason = new Error("the caller gave up");
    const aborted = new Deadline(1, caller.signal);
    caller.abort(reason);
    await expect(aborted.race(never())).rejects.toBe(reason);
    // Its clock still runs (only end() stops it): past the deadline, the caller's reason stays.
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(aborted.callerAborted).toBe(true);
    expect(aborted.signal.reason).toBe(reason);
    aborted.end();
  });

  it("end(true) aborts what the call left running, asked for before or after; end() never aborts it", () => {
    const abandoned = new Deadline(60_000, undefined);
    const before = abandoned.signal;
    abandoned.end(true);
    expect(before.aborted).toBe(true);
    expect(abandoned.signal).toBe(before);
    const askedAfter = new Deadline(60_000, undefined);
    askedAfter.end(true);
    expect(askedAfter.signal.aborted).toBe(true);
    expect(askedAfter.timedOut).toBe(false);
    const kept = new Deadline(1, undefined);
    kept.end();
    expect(kept.signal.aborted).toBe(false);
  });
});
