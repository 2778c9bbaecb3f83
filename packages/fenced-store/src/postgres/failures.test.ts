import { describe, expect, it } from "vitest";
import { OutcomeUnknownError, StoreSetupError, StoreUnavailableError } from "../errors.js";
import { DeadlineExceeded } from "../deadline.js";
import { callbackFailure, classify, type FailureContext, type Phase } from "./failures.js";

// The rule of failures.ts, case by case, on errors shaped as pg raises them: a DatabaseError carries a
// five-character SQLSTATE `code` and a `severity`; a socket error a Node system `code`; pg's own
// "Connection terminated unexpectedly" and a client that is not queryable carry no code at all.

function databaseError(code: string, severity = "ERROR"): Error {
  return Object.assign(new Error(`server said ${code}`), { code, severity });
}

function systemError(code: string): Error {
  return Object.assign(new Error(`socket ${code}`), { code, errno: -1, syscall: "connect" });
}

const at = (phase: Phase, extra: Partial<FailureContext> = {}): FailureContext => ({
  phase,
  operation: "put",
  key: "k",
  timedOut: false,
  ...extra,
});

describe("classify: what a failure of the driver becomes", () => {
  it("no answer once the write or COMMIT was sent: OutcomeUnknownError, whatever the error", () => {
    for (const err of [new Error("terminated"), systemError("ECONNRESET"), new DeadlineExceeded(1_000)]) {
      const classified = classify(err, at("commit"));
      expect(classified).toBeInstanceOf(OutcomeUnknownError);
      expect(classified).toMatchObject({ backend: "postgres", key: "k", operation: "put", cause: err });
    }
    // The session ended by the server (a shutdown, a crash of another backend, a cancel) may come after the commit record.
    for (const code of ["57P01", "57P02", "57014", "08006", "58030", "XX000", "53100"])
      expect(classify(databaseError(code, "FATAL"), at("commit"))).toBeInstanceOf(OutcomeUnknownError);
  });

  it("before anything was applied: StoreUnavailableError, its reason from the code and the deadline", () => {
    const reason = (err: unknown, phase: Phase, timedOut = false) => {
      const classified = classify(err, at(phase, { timedOut }));
      expect(classified).toBeInstanceOf(StoreUnavailableError);
      return (classified as StoreUnavailableError).reason;
    };
    expect(reason(systemError("ECONNREFUSED"), "connect")).toBe("refused");
    expect(reason(systemError("ENOENT"), "connect")).toBe("refused");
    expect(reason(systemError("ETIMEDOUT"), "connect")).toBe("timeout");
    expect(reason(systemError("ECONNRESET"), "connect")).toBe("connection");
    expect(reason(databaseError("57P03", "FATAL"), "connect")).toBe("refused"); // the server is starting up
    expect(reason(databaseError("53300", "FATAL"), "connect")).toBe("refused"); // too many connections
    expect(reason(new DeadlineExceeded(1_000), "connect")).toBe("timeout");
    expect(reason(new Error("no code: terminated"), "read")).toBe("connection");
    expect(reason(new Error("no code: terminated"), "read", true)).toBe("timeout");
    expect(reason(databaseError("57014"), "read")).toBe("timeout"); // the store's statement_timeout
    expect(reason(databaseError("57P01", "FATAL"), "read")).toBe("connection");
  });

  it("the store's objects missing: StoreSetupError not-migrated, except inside migrate()", () => {
    for (const code of ["3F000", "42P01", "42703", "42883"])
      for (const phase of ["read", "commit"] as const) {
        const classified = classify(databaseError(code), at(phase));
        expect(classified).toBeInstanceOf(StoreSetupError);
        expect(classified).toMatchObject({ problem: "not-migrated" });
      }
    const inMigrate = databaseError("42P01");
    expect(classify(inMigrate, at("read", { operation: "migrate" }))).toBe(inMigrate);
  });

  it("anything else the server answered passes through unchanged: the statement failed as a whole", () => {
    for (const code of ["FN001", "FN002", "23505", "40P01", "28P01", "3D000", "22P02"])
      for (const phase of ["connect", "read", "commit"] as const) {
        const err = databaseError(code);
        expect(classify(err, at(phase))).toBe(err);
      }
  });

  it("a five-letter system code is not an SQLSTATE: without a severity it is no answer of the server", () => {
    expect(classify(systemError("EPIPE"), at("commit"))).toBeInstanceOf(OutcomeUnknownError);
    expect(classify(systemError("EPIPE"), at("read"))).toMatchObject({ name: "StoreUnavailableError", reason: "connection" });
  });
});

describe("callbackFailure: what an error of transaction()'s callback becomes", () => {
  const call = (broken: boolean, timedOut: boolean) => ({ operation: "transaction", broken, timedOut });

  it("the callback's own error passes through unchanged while the connection and the deadline held, its SQL errors included", () => {
    for (const err of [new Error("mine"), databaseError("42P01"), databaseError("23505"), "not even an Error"])
      expect(callbackFailure(err, call(false, false))).toBe(err);
  });

  it("the store's reasons while it ran: StoreUnavailableError, the callback's error as its cause", () => {
    const mine = new Error("mine");
    expect(callbackFailure(mine, call(false, true))).toMatchObject({ name: "StoreUnavailableError", reason: "timeout", cause: mine });
    expect(callbackFailure(mine, call(true, false))).toMatchObject({ name: "StoreUnavailableError", reason: "connection", cause: mine });
    // The server's statement_timeout, set by the store to its deadline, may cancel the statement just before the deadline fires.
    const cancelled = databaseError("57014");
    expect(callbackFailure(cancelled, call(false, false))).toMatchObject({ reason: "timeout", operation: "transaction", cause: cancelled });
    expect(callbackFailure(databaseError("42P01"), call(false, true))).toBeInstanceOf(StoreUnavailableError);
  });
});
