import { describe, expect, it } from "vitest";
import { noFaults } from "./history.js";
import { verdict, type RunSummary } from "./suite.js";

function run(overrides: Partial<RunSummary> = {}): RunSummary {
  return {
    ops: 100,
    byOutcome: { ok: 90, refused: 5, unavailable: 3, "outcome-unknown": 2, error: 0 },
    outcomeUnknown: { landed: 1, notSeen: 1 },
    failByReason: {},
    errors: {},
    durationMs: 1_000,
    timedOut: false,
    deaths: [],
    problems: [],
    liveness: {
      calls: 400,
      late: 0,
      unanswered: 0,
      boundMs: 3_500,
      slowestMs: 2_100,
      slowest: "write",
      slowestByStep: { write: 2_100 },
      firstLate: undefined,
    },
    faults: noFaults(),
    faultsMissed: 0,
    violations: { "lost-update": 0, "token-decrease": 0, "duplicate-token": 0, "torn-pair": 0 },
    repeatedTokens: 3,
    tokenRegressions: 3,
    failedButApplied: 0,
    finalCount: 90,
    ...overrides,
  };
}

describe("verdict", () => {
  it("passes a full run with no violation, every call answered in time and no process lost", () => {
    expect(verdict({ postgres: { full: run() } })).toEqual([]);
  });

  it("fails on a late or missing answer and on a process death, in any configuration", () => {
    const late = run({ liveness: { ...run().liveness, late: 2, firstLate: "read of 1.2 (worker 1) at 3.0 s took 4100 ms" } });
    expect(verdict({ s3: { full: late } })).toEqual([
      expect.stringMatching(/^s3\/full: 2 call\(s\) answered after 3500 ms, the first: read of 1\.2/),
    ]);
    const unanswered = run({ liveness: { ...run().liveness, unanswered: 1 } });
    expect(verdict({ s3: { ratchet: unanswered } })).toEqual(["s3/ratchet: 1 operation(s) never answered"]);
    const died = run({ deaths: ["worker 3 died during the run (1): boom"] });
    expect(verdict({ postgres: { ratchet: died } })).toEqual(["postgres/ratchet: worker 3 died during the run (1): boom"]);
  });

  it("wants a wipe round to show: a repeated token, or with pairs a token below one handed out before", () => {
    expect(verdict({ s3: { full: run({ repeatedTokens: 0 }) } })).toEqual([
      "s3/full: the lock repeated no token — no wipe round took effect",
    ]);
    const pairs = { ops: 50, atomic: 50, judged: 40 };
    expect(verdict({ s3: { full: run({ repeatedTokens: 0, pairs }) } })).toEqual([]);
    expect(verdict({ s3: { full: run({ repeatedTokens: 0, tokenRegressions: 0, pairs }) } })).toEqual([
      "s3/full: the lock neither repeated a token nor went below one it had handed out — no wipe round took effect",
    ]);
  });

  it("pairs written in one transaction must have been judged", () => {
    expect(verdict({ postgres: { full: run({ pairs: { ops: 50, atomic: 50, judged: 0 } }) } })).toEqual([
      "postgres/full: no pair written in one transaction was seen landed — atomicity was never judged",
    ]);
    expect(verdict({ s3: { full: run({ pairs: { ops: 50, atomic: 0, judged: 0 } }) } })).toEqual([]);
  });
});
