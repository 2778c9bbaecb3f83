// Pins how both stores take the fences, signals and timeouts a call is given (options.ts): one fence,
// an array or a lease of several, each checked and copied; a lease known to have ended refused before
// any I/O with its error saying nothing was applied; a transfer between two distinct resources; a
// signal that is not one, and a timeout out of range, refused with InvalidArgumentError naming it.
import { describe, expect, it } from "vitest";
import { FencedError, InvalidArgumentError } from "@fenced/fence";
import { checkSignal, liveFences, milliseconds, oneOrMoreFences, signalOnly, timeoutOption, transferFences } from "./options.js";

/** `check` throws an InvalidArgumentError naming `argument`. */
const refusedAs = (argument: string, check: () => unknown): void =>
  expect(check, argument).toThrow(expect.objectContaining({ constructor: InvalidArgumentError, argument }));

/** A lease's error as the lock makes it: code LEASE_LOST, applied "unknown". */
class LeaseEnded extends FencedError {
  constructor() {
    super("LEASE_LOST", "the lease ended", { applied: "unknown" });
  }
}

const a = { resource: "a", token: 1n, holder: "h" };
const b = { resource: "b", token: 2n, holder: "h" };

describe("the fences a call presents", () => {
  it("one fence, an array or a lease's fences: each checked and copied, in the order given", () => {
    expect(oneOrMoreFences(a)).toEqual([a]);
    expect(oneOrMoreFences([b, a])).toEqual([b, a]);
    const lease = { fences: [a, b], lostReason: undefined };
    const checked = oneOrMoreFences(lease);
    lease.fences[0] = { ...a, token: 9n };
    expect(checked).toEqual([a, b]);
    refusedAs("fence[1].resource", () => oneOrMoreFences([a, { ...a }]));
    refusedAs("fence.fences", () => oneOrMoreFences({ fences: [] }));
  });

  it("a lease that has ended, or any one of its fences, is refused before any I/O, its error a copy saying nothing was applied", () => {
    const ended = new LeaseEnded();
    for (const value of [{ fences: [a, b], lostReason: ended }, [a, { ...b, lostReason: ended }]]) {
      let err: unknown;
      try {
        liveFences(value);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(LeaseEnded);
      expect(err).not.toBe(ended);
      expect((err as FencedError).applied).toBe("no");
      expect((err as Error).cause).toBe(ended);
      expect(ended.applied).toBe("unknown");
    }
  });

  it("a transfer moves a key between two distinct resources, both fences checked and named", () => {
    expect(transferFences(a, b)).toEqual({ from: a, to: b });
    refusedAs("options.to.resource", () => transferFences(a, { ...a, token: 5n }));
    refusedAs("options.from", () => transferFences(undefined, b));
    refusedAs("options.to.holder", () => transferFences(a, { ...b, holder: "h h" }));
  });
});

describe("a signal and a timeout", () => {
  it("a signal is anything shaped as an AbortSignal; anything else is refused, undefined is none", () => {
    const signal = new AbortController().signal;
    expect(checkSignal(signal)).toBe(signal);
    expect(checkSignal(undefined)).toBeUndefined();
    for (const bad of [null, true, {}, { aborted: "no", addEventListener: () => undefined }, { aborted: false }])
      refusedAs("options.signal", () => checkSignal(bad));
    expect(signalOnly(undefined)).toBeUndefined();
    expect(signalOnly({ signal })).toBe(signal);
    refusedAs("options", () => signalOnly("signal"));
  });

  it("a timeout is an integer number of ms from 100 to 600,000, 5,000 by default", () => {
    expect(timeoutOption(undefined, "timeoutMs")).toBe(5_000);
    expect(timeoutOption(100, "timeoutMs")).toBe(100);
    expect(timeoutOption(600_000, "timeoutMs")).toBe(600_000);
    for (const bad of [99, 600_001, 1000.5, Number.NaN, Number.POSITIVE_INFINITY, "5000", null])
      refusedAs("timeoutMs", () => timeoutOption(bad, "timeoutMs"));
    expect(milliseconds("x", undefined, 0, 10, 7)).toBe(7);
    refusedAs("x", () => milliseconds("x", 11, 0, 10, 7));
  });
});
