import { describe, expect, it } from "vitest";
import { refuseEndedLease } from "./fence.js";

/** The fence behind a proxy that records every property read, in order. */
function watched<T extends object>(fence: T): { fence: T; reads: PropertyKey[] } {
  const reads: PropertyKey[] = [];
  const proxy = new Proxy(fence, {
    get(target, property) {
      reads.push(property);
      return Reflect.get(target, property, target) as unknown;
    },
  });
  return { fence: proxy, reads };
}

function aborted(reason?: unknown): AbortSignal {
  const controller = new AbortController();
  controller.abort(reason);
  return controller.signal;
}

describe("refuseEndedLease", () => {
  it("throws a lease's lostReason when it is an Error, reading it once and never its signal", () => {
    const lost = new Error("lease lost: released");
    const { fence, reads } = watched({ resource: "r", token: 1n, lostReason: lost, signal: aborted(new Error("other")) });
    expect(() => refuseEndedLease(fence)).toThrow(lost);
    expect(reads).toEqual(["lostReason"]);
  });

  it("lets a live lease through without reading its signal (reading it would allocate a controller and a timer)", () => {
    const { fence, reads } = watched({ resource: "r", token: 1n, lostReason: undefined, signal: aborted(new Error("not consulted")) });
    expect(() => refuseEndedLease(fence)).not.toThrow();
    expect(reads).toEqual(["lostReason"]);
  });

  it("without lostReason, throws an aborted signal's reason, reading signal, aborted and reason once each", () => {
    const reason = new Error("gone");
    const signal = watched(aborted(reason));
    const { fence, reads } = watched({ resource: "r", token: 1n, signal: signal.fence });
    expect(() => refuseEndedLease(fence)).toThrow(reason);
    expect(reads).toEqual(["signal"]);
    expect(signal.reads).toEqual(["aborted", "reason"]);
  });

  it("an aborted signal-like object without a reason throws an AbortError", () => {
    let thrown: unknown;
    try {
      refuseEndedLease({ resource: "r", token: 1n, signal: { aborted: true } });
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(DOMException);
    expect((thrown as DOMException).name).toBe("AbortError");
  });

  it("lets through plain fences, live signals, and values that are no object (checkFence judges those)", () => {
    for (const fence of [
      { resource: "r", token: 1n },
      { resource: "r", token: 1n, holder: "h" },
      { resource: "r", token: 1n, signal: new AbortController().signal },
      { resource: "r", token: 1n, signal: { aborted: "yes" } },
      { resource: "r", token: 1n, signal: null },
      { resource: "r", token: 1n, lostReason: "released" },
      null,
      undefined,
      "fence",
      7,
    ]) {
      expect(
        () => refuseEndedLease(fence),
        JSON.stringify(fence, (_k, v: unknown) => (typeof v === "bigint" ? `${v}n` : v)),
      ).not.toThrow();
    }
  });
});
