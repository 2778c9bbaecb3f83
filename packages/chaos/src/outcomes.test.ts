import { OutcomeUnknownError, StaleTokenError, StoreSetupError, StoreUnavailableError, VersionMismatchError } from "@fenced/store";
import { describe, expect, it } from "vitest";
import { GatewayFailedError, GatewayRefusedError, LockBusyError } from "./gateway-client.js";
import { NoLeaseError } from "./lease-source.js";
import { classify, errorLabel } from "./outcomes.js";

const reset = Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" });

describe("outcome of an operation, by the type of its error", () => {
  it("refusals and a missing lease are definite whenever they come", () => {
    for (const sent of [false, true]) {
      expect(classify(new StaleTokenError("r", 1n, 2n), sent)).toEqual({ outcome: "fail", reason: "stale" });
      expect(classify(new VersionMismatchError("k", "1", "2"), sent)).toEqual({ outcome: "fail", reason: "version" });
      expect(classify(new GatewayRefusedError(403, "/problems/forbidden", "no"), sent)).toEqual({ outcome: "fail", reason: "refused" });
      expect(classify(new StoreUnavailableError("postgres", "timeout", "put"), sent)).toEqual({ outcome: "fail", reason: "unavailable" });
      expect(classify(new GatewayFailedError(503, "/problems/unavailable", "down"), sent)).toEqual({
        outcome: "fail",
        reason: "unavailable",
      });
      // Refused by admission control before any lock or store work: nothing written, even once the request left.
      expect(classify(new GatewayFailedError(503, "/problems/overloaded", "busy"), sent)).toEqual({
        outcome: "fail",
        reason: "unavailable",
      });
    }
    expect(classify(new NoLeaseError("no lease within the deadline"), false)).toEqual({ outcome: "fail", reason: "lock" });
    expect(classify(new LockBusyError(503, "no quorum"), false)).toEqual({ outcome: "fail", reason: "lock" });
  });

  it("an answer lost after the counter's write left is an unknown outcome; before it, nothing was written", () => {
    const lost = [
      new OutcomeUnknownError("s3", "k", "put"),
      new GatewayFailedError(503, "/problems/outcome-unknown", "lost"),
      reset,
      Object.assign(new Error("The operation was aborted due to timeout"), { name: "TimeoutError" }),
      new Error("Connection terminated unexpectedly"),
    ];
    for (const err of lost) {
      expect(classify(err, true), errorLabel(err)).toEqual({ outcome: "info" });
      expect(classify(err, false), errorLabel(err)).toEqual({ outcome: "fail", reason: "unavailable" });
    }
  });

  it("anything else is an error of no known type (a finding), and unknown once the write left", () => {
    const setup = new StoreSetupError("postgres", "not-migrated", "run migrate()");
    expect(classify(setup, false)).toEqual({ outcome: "fail", reason: "error" });
    expect(classify(new GatewayFailedError(500, "/problems/internal", "bug"), false)).toEqual({ outcome: "fail", reason: "error" });
    expect(classify(new TypeError("x is undefined"), false)).toEqual({ outcome: "fail", reason: "error" });
    expect(classify(new TypeError("x is undefined"), true)).toEqual({ outcome: "info" });
  });

  it("labels errors by class, gateway status and problem type, or code", () => {
    expect(errorLabel(new StoreUnavailableError("s3", "refused", "get"))).toBe("StoreUnavailableError (refused)");
    expect(errorLabel(new GatewayFailedError(503, "/problems/outcome-unknown", "lost"))).toBe("503 /problems/outcome-unknown");
    expect(errorLabel(reset)).toBe("ECONNRESET");
    expect(errorLabel(new StaleTokenError("r", 1n, 2n))).toBe("StaleTokenError");
  });
});
