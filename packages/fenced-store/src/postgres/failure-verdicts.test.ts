import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DeadlineExceeded } from "../deadline.js";
import { OutcomeUnknownError, StoreUnavailableError } from "../errors.js";
import type { CommitAt } from "./commit-at.js";
import { classify, failedIn, type Phase, type Sent } from "./failures.js";
import { foreignKeyRefusal, outOfOrder, putAllRefused, versionRefusal } from "./refusals.js";
import { FENCE_REFUSED, FOREIGN_KEY_REFUSED, VERSION_REFUSED } from "./schema-sql.js";
import {
  OWNERSHIP,
  ORDERED_LOST,
  UNORDERED_CUT,
  EMPTY_SYNC_LOST,
  ROW_SYNC_LOST,
  WRAPPED,
  PAST_DEADLINE,
  SERVER_DIED,
  NOT_SENT,
  NOT_MIGRATED,
  CONDITIONAL,
  NEVER_WRITTEN,
  PUT_ALL,
  PAUSED,
  type Pin,
} from "./server-pins-test-support.js";

// What a failed statement of the PostgreSQL writer becomes (failures.ts, failedIn then classify) and
// which refusal a server's answer is (refusals.ts), without a server. Each case names the
// real-server test that shows it on the wire (server-pins-test-support.ts).

// Errors shaped as pg raises them (failures.test.ts says how each is told apart).
const databaseError = (code: string, severity = "ERROR"): Error => Object.assign(new Error(`server said ${code}`), { code, severity });
const systemError = (code: string): Error => Object.assign(new Error(`socket ${code}`), { code, errno: -1, syscall: "read" });
const terminated = (): Error => new Error("Connection terminated unexpectedly");

const seen = (sent: boolean, answered = false, row = false, shown = true): Sent => ({ sent, shown, answered, row });

describe("failedIn, then classify: what a failed write becomes, and its applied", () => {
  type Case = readonly [
    what: string,
    commitAt: CommitAt,
    seen: Sent,
    err: () => unknown,
    timedOut: boolean,
    expected: string,
    pinnedBy: Pin,
  ];
  // expected: the error's name and reason, or "unchanged" (the server's refusal passes through: applied "no").
  const CASES: readonly Case[] = [
    [
      "with its commit, the connection cut after it was sent",
      "with-statement",
      seen(true),
      terminated,
      false,
      "OutcomeUnknownError",
      ORDERED_LOST,
    ],
    [
      "with its commit, the deadline passed waiting for the answer",
      "with-statement",
      seen(true),
      () => new DeadlineExceeded(1_000),
      true,
      "OutcomeUnknownError",
      PAST_DEADLINE,
    ],
    [
      "with its commit, the server shut down under it",
      "with-statement",
      seen(true),
      () => databaseError("57P01", "FATAL"),
      false,
      "OutcomeUnknownError",
      SERVER_DIED,
    ],
    [
      "with its commit, the connection broken before it was sent",
      "with-statement",
      seen(false),
      terminated,
      false,
      "StoreUnavailableError connection",
      NOT_SENT,
    ],
    [
      "with its commit, the deadline passed before it was sent",
      "with-statement",
      seen(false),
      () => new DeadlineExceeded(1_000),
      true,
      "StoreUnavailableError timeout",
      // Its phase as NOT_SENT shows (a broken connection there); a read's deadline is "timeout" as PAUSED shows.
      NOT_SENT,
    ],
    [
      "with its commit, refused by the server (a key of another resource)",
      "with-statement",
      seen(true),
      () => databaseError(FOREIGN_KEY_REFUSED),
      false,
      "unchanged",
      OWNERSHIP,
    ],
    [
      "with its commit, the store's tables missing",
      "with-statement",
      seen(true),
      () => databaseError("42P01"),
      false,
      "StoreSetupError",
      NOT_MIGRATED,
    ],
    [
      "after its answer, the connection cut before the answer",
      "after-answer",
      seen(true),
      terminated,
      false,
      "StoreUnavailableError connection",
      UNORDERED_CUT,
    ],
    [
      "after its answer, cut after a row, before CommandComplete",
      "after-answer",
      seen(true, false, true),
      terminated,
      false,
      "StoreUnavailableError connection",
      UNORDERED_CUT,
    ],
    [
      "after its answer, the Sync's answer lost after a row",
      "after-answer",
      seen(true, true, true),
      terminated,
      false,
      "OutcomeUnknownError",
      ROW_SYNC_LOST,
    ],
    [
      "after its answer, the Sync's answer lost after no row",
      "after-answer",
      seen(true, true, false),
      terminated,
      false,
      "StoreUnavailableError connection",
      EMPTY_SYNC_LOST,
    ],
    [
      "after its answer, the Sync's answer lost, the connection not shown",
      "after-answer",
      seen(true, false, false, false),
      terminated,
      false,
      "OutcomeUnknownError",
      WRAPPED,
    ],
    [
      "after its answer, the deadline passed before the answer",
      "after-answer",
      seen(true),
      () => new DeadlineExceeded(1_000),
      true,
      "StoreUnavailableError timeout",
      // Its phase (a read's: nothing committed) as UNORDERED_CUT shows; a read's deadline is "timeout" as PAUSED shows.
      PAUSED,
    ],
    [
      "after its answer, broken before it was sent",
      "after-answer",
      seen(false),
      systemError.bind(null, "ECONNRESET"),
      false,
      "StoreUnavailableError connection",
      // Not sent is a read's whatever the commit (failedIn asks it first); NOT_SENT shows it for a with-statement write.
      NOT_SENT,
    ],
  ];

  it("every kind of answer and its loss, for both kinds of commit, as a table", () => {
    for (const [what, commitAt, sent, err, timedOut, expected] of CASES) {
      const error = err();
      const phase = failedIn({ commitAt }, sent);
      const classified = classify(error, { phase, operation: "put", key: "k", timedOut });
      if (expected === "unchanged") {
        expect(classified, what).toBe(error);
        continue;
      }
      const [name, reason] = expected.split(" ");
      expect(classified, what).toMatchObject({ name, applied: name === "OutcomeUnknownError" ? "unknown" : "no" });
      if (reason !== undefined) expect(classified, what).toMatchObject({ reason });
    }
  });

  const arbitrarySeen = fc.record({ sent: fc.boolean(), shown: fc.boolean(), answered: fc.boolean(), row: fc.boolean() });
  const arbitraryError = fc.oneof(
    fc.constantFrom("08006", "57P01", "57014", "53300", "XX000", "FN001", "FN002", "23505", "42P01").map((code) => databaseError(code)),
    fc.constantFrom("ECONNRESET", "EPIPE", "ETIMEDOUT").map(systemError),
    fc.constant(terminated()),
    fc.constant(new DeadlineExceeded(1_000)),
  );

  it("outcome unknown only when the commit may have left: sent, and with its statement, or after an answer with a row, or unseen", () => {
    fc.assert(
      fc.property(
        fc.constantFrom<CommitAt>("with-statement", "after-answer"),
        arbitrarySeen,
        arbitraryError,
        fc.boolean(),
        (commitAt, s, err, timedOut) => {
          const classified = classify(err, { phase: failedIn({ commitAt }, s), operation: "put", key: "k", timedOut });
          const mayHaveCommitted = s.sent && (commitAt === "with-statement" || !s.shown || (s.answered && s.row));
          if (classified instanceof OutcomeUnknownError) expect(mayHaveCommitted).toBe(true);
          else if (classified !== err) expect((classified as { applied?: unknown }).applied).toBe("no");
          // A loss without the server's refusal, once the commit may have left, is never read as nothing applied.
          if (mayHaveCommitted && !(classified instanceof OutcomeUnknownError))
            expect(classified).not.toBeInstanceOf(StoreUnavailableError);
        },
      ),
    );
  });

  it("a read, BEGIN or COMMIT keeps its phase once sent, and is a read's when nothing was sent", () => {
    fc.assert(
      fc.property(fc.constantFrom<Phase>("read", "commit"), arbitrarySeen, (phase, s) => {
        expect(failedIn({ phase }, s)).toBe(s.sent ? phase : "read");
      }),
    );
  });
});

describe("refusals: which of the server's answers is which refusal, and what is left to failures.ts", () => {
  // The store's own refusals raised by a statement (schema-sql.ts), by SQLSTATE, with DETAIL as the statement sets it.
  const refusal = (code: string, detail: string): Error => Object.assign(databaseError(code), { detail });
  const CASES: readonly [code: string, detail: string, expected: string, pinnedBy: Pin][] = [
    [FOREIGN_KEY_REFUSED, "s", "ResourceMismatchError owner s, putAll refused", OWNERSHIP],
    [FOREIGN_KEY_REFUSED, "", "putAll refused", PUT_ALL], // no owner named: not a put's refusal
    [VERSION_REFUSED, "7", "VersionMismatchError actual 7, out of order, putAll refused", CONDITIONAL],
    [VERSION_REFUSED, "", "VersionMismatchError no actual, out of order, putAll refused", NEVER_WRITTEN],
    [FENCE_REFUSED, "", "putAll refused", PUT_ALL],
    ["23505", "x", "unrecognised", OWNERSHIP],
    ["57P01", "", "unrecognised", SERVER_DIED],
  ];

  it("each SQLSTATE and DETAIL, as a table; putAll() in one statement reads every refusal as refused, and runs again as a transaction", () => {
    for (const [code, detail, expected] of CASES) {
      const err = refusal(code, detail);
      const owner = foreignKeyRefusal(err, "k", "r");
      const version = versionRefusal(err, "k", "5");
      const read = [
        owner === undefined ? undefined : `ResourceMismatchError owner ${owner.owner}`,
        version === undefined
          ? undefined
          : `VersionMismatchError ${version.actual === undefined ? "no actual" : `actual ${version.actual}`}`,
      ].filter((x) => x !== undefined);
      if (outOfOrder(err)) read.push("out of order");
      if (putAllRefused(err)) read.push("putAll refused");
      expect(read.length === 0 ? "unrecognised" : read.join(", "), `${code} ${JSON.stringify(detail)}`).toBe(expected);
      for (const applied of [owner?.applied, version?.applied]) if (applied !== undefined) expect(applied).toBe("no");
      // A refusal is a whole statement refused: failures.ts passes it through unchanged, in any phase.
      if (code.startsWith("FN"))
        for (const phase of ["read", "commit"] as const) expect(classify(err, { phase, operation: "put", timedOut: false })).toBe(err);
    }
  });
});
