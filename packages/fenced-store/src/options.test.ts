import { describe, expect, it } from "vitest";
import { FencedError } from "@fenced/fence";
import { OutcomeUnknownError } from "./errors.js";
import { refuseAborted } from "./options.js";

// refuseAborted, the check every operation makes of its signal before any I/O. The real leases'
// case (a lease's signal aborting with its LeaseLostError) is lost-lease.test.ts's, per backend.

/** A lease's error as the lock makes it: code LEASE_LOST, applied "unknown" (nodes were asked). */
class LeaseEnded extends FencedError {
  constructor() {
    super("LEASE_LOST", "the lease ended", { applied: "unknown" });
  }
}

const abortedWith = (reason: unknown): AbortSignal => {
  const controller = new AbortController();
  controller.abort(reason);
  return controller.signal;
};

const thrown = (signal: AbortSignal): unknown => {
  try {
    refuseAborted(signal);
  } catch (err) {
    return err;
  }
  throw new Error("refuseAborted did not throw");
};

describe("refuseAborted", () => {
  it("answers a lease's error with a copy of its class saying nothing was applied, the lease's own left as it was", () => {
    const reason = new LeaseEnded();
    const err = thrown(abortedWith(reason));
    expect(err).toBeInstanceOf(LeaseEnded);
    expect(err).toMatchObject({ code: "LEASE_LOST", applied: "no", message: reason.message });
    expect((err as Error).cause).toBe(reason);
    expect(reason.applied).toBe("unknown");
  });

  it("throws any other reason as it is: an OutcomeUnknownError passed on keeps its applied, and is the signal's own object", () => {
    const reason = new OutcomeUnknownError("postgres", "k", "put");
    expect(thrown(abortedWith(reason))).toBe(reason);
    expect(reason.applied).toBe("unknown");
    const own = new Error("the caller's");
    expect(thrown(abortedWith(own))).toBe(own);
  });
});
