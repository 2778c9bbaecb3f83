import { readFileSync } from "node:fs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DeadlineExceeded } from "../deadline.js";
import { OutcomeUnknownError, StoreUnavailableError } from "../errors.js";
import { COMMIT_AT, type CommitAt } from "./commit-at.js";
import { foreignKeyRefusal, outOfOrder, putAllRefused, versionRefusal } from "./refusals.js";
import { FENCE_REFUSED, FOREIGN_KEY_REFUSED, VERSION_REFUSED } from "./schema-sql.js";
import { quoteSchema, statements } from "./sql.js";
import { classify, failedIn, type Phase, type Sent } from "./failures.js";
import { FIRST_PUT, nextPut, putValues, WriteOrder, type PutAnswer, type PutStatement } from "./write-order.js";

// The decisions of the PostgreSQL writer that live in TypeScript, without a server: which statement an
// unconditional put sends next (write-order.ts, nextPut), and what a failed statement becomes
// (failures.ts, failedIn then classify). Each case names the real-server test that pins the same
// behaviour on the wire (`pinnedBy`: a file of this folder and a test's title), and the last test
// checks that every named test exists.

/** A test of this folder, by file and title: the real-server test that shows a case on the wire. */
type Pin = readonly [file: string, title: string];

const STEADY: Pin = [
  "write-order.test.ts",
  "steady state, a new lease's first write, an out-of-order refusal, a key of another resource, and the worst case",
];
const ALL_LAND: Pin = [
  "write-order.test.ts",
  "all land: those refused as out of order (they came after the same version) are sent again unordered",
];
const ARTICLE: Pin = ["store.test.ts", "token 33 reads and pauses, 34 writes, 33 resumes and writes: 33 is refused and 34's value stays"];
const OWNERSHIP: Pin = ["ownership.test.ts", "put, delete and ifVersion put naming another resource (token 0) are refused"];
const ORDERED_LOST: Pin = ["outcomes.test.ts", "put(): sent ordered with its commit, the answer cut: OutcomeUnknownError, it landed"];
const UNORDERED_CUT: Pin = [
  "outcomes.test.ts",
  "put(): refused as out of order, sent unordered, its statement ran and the answer was cut before its commit (Sync) was sent",
];
const EMPTY_SYNC_LOST: Pin = [
  "outcomes.test.ts",
  "put() refused as out of order, then sent unordered: its zero-row answer came, the answer to its Sync was cut",
];
const ROW_SYNC_LOST: Pin = [
  "in-doubt.test.ts",
  "an unordered put (after its answer) that wrote, the answer to its Sync lost: OutcomeUnknownError and it landed, every time",
];
const WRAPPED: Pin = ["in-doubt.test.ts", "through a pool whose clients do not show pg's protocol connection (a wrapper)"];
const PAST_DEADLINE: Pin = ["in-doubt.test.ts", "an unconditional put waiting on the fence row past the deadline: OutcomeUnknownError"];
const SERVER_DIED: Pin = ["faults.test.ts", "put(): waiting for the fence row lock, its commit (Sync) sent with it: OutcomeUnknownError"];
const NOT_SENT: Pin = [
  "outcomes.test.ts",
  "a put's next statement on a connection the server terminated between two statements: not sent, StoreUnavailableError",
];
const NOT_MIGRATED: Pin = ["outcomes.test.ts", "every operation fails with StoreSetupError not-migrated"];
// Not reachable on the wire, so pinned by the statement's text (the last test): putShared carries no `after`.
const SQL_TEXT: Pin = [
  "decisions.test.ts",
  "the statements' text: the ordered ones check the version they come after ($6), putShared has no such check",
];
const CONDITIONAL: Pin = [
  "conditional.test.ts",
  "put and delete with ifVersion send one statement, with no transaction of their own, written or refused for owner or version",
];
const NEVER_WRITTEN: Pin = ["conditional.test.ts", "on a key never written, or deleted, ifVersion is refused with no actual version"];
const PUT_ALL: Pin = [
  "batch.test.ts",
  "one statement when nothing is refused; refused in any way, nothing written and the transaction that follows names it",
];
const LATE_DELIVERED: Pin = [
  "in-doubt.test.ts",
  "delayed on the network past the deadline, then delivered: each finds the holder's later write and is refused",
];

const PINS = [
  STEADY,
  ALL_LAND,
  ARTICLE,
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
  SQL_TEXT,
  CONDITIONAL,
  NEVER_WRITTEN,
  PUT_ALL,
  LATE_DELIVERED,
];

const STATEMENTS: readonly PutStatement[] = ["putOrderedShared", "putOrdered", "putShared"];
const ANSWERS: readonly PutAnswer[] = ["row", "no-row", "out-of-order", "error"];

describe("nextPut: the statement an unconditional put sends next", () => {
  // Every (statement sent, its answer): the next statement, or how the put ends.
  const TABLE: readonly [PutStatement, PutAnswer, ReturnType<typeof nextPut>, Pin][] = [
    ["putOrderedShared", "row", "written", STEADY], // the steady state: one statement
    ["putOrderedShared", "no-row", "putOrdered", STEADY], // a new lease's first write: the raise
    ["putOrderedShared", "out-of-order", "putShared", STEADY], // written at this fence by another store
    ["putOrderedShared", "error", "throw", STEADY], // a key of another resource (FN001): one statement
    ["putOrdered", "row", "written", STEADY],
    ["putOrdered", "no-row", "stale", ARTICLE],
    ["putOrdered", "out-of-order", "putShared", STEADY], // the worst case's second refusal
    ["putOrdered", "error", "throw", OWNERSHIP],
    ["putShared", "row", "written", ALL_LAND],
    ["putShared", "no-row", "stale", STEADY], // the worst case's third statement: a raise since
    ["putShared", "out-of-order", "throw", SQL_TEXT], // never sent twice: the error would pass through
    ["putShared", "error", "throw", OWNERSHIP],
  ];

  it("every statement and answer, as a table", () => {
    expect(TABLE.map(([s, a]) => `${s} ${a}`).sort()).toEqual(STATEMENTS.flatMap((s) => ANSWERS.map((a) => `${s} ${a}`)).sort());
    for (const [sent, answer, next, pinnedBy] of TABLE) expect(nextPut(sent, answer), `${sent} ${answer} (${pinnedBy[0]})`).toBe(next);
  });

  /** The statements a put sends when each answers as `answers` says, and how it ends: the driver of store.ts, with the server's answers given. */
  function run(answers: (s: PutStatement, i: number) => PutAnswer): { sent: PutStatement[]; end: string } {
    const sent: PutStatement[] = [];
    for (let statement = FIRST_PUT; ;) {
      sent.push(statement);
      const answer = answers(statement, sent.length - 1);
      const next = nextPut(statement, answer);
      if (next === "written" || next === "stale" || next === "throw") return { sent, end: next };
      if (sent.length > 10) return { sent, end: "loop" };
      statement = next;
    }
  }

  it("whatever the server answers: the shared statement first, three at most, none twice, putShared only after an out-of-order refusal, written only on a row", () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...ANSWERS), { minLength: 3, maxLength: 3 }), (answers) => {
        const { sent, end } = run((_, i) => answers[i] as PutAnswer);
        expect(sent[0]).toBe("putOrderedShared");
        expect(sent.length).toBeLessThanOrEqual(3);
        expect(new Set(sent).size).toBe(sent.length);
        sent.forEach((s, i) => {
          if (s === "putShared") expect(answers[i - 1]).toBe("out-of-order");
        });
        const last = answers[sent.length - 1];
        expect(end).toBe(last === "row" ? "written" : last === "no-row" ? "stale" : "throw");
      }),
    );
    // The worst case: three statements, as write-order.test.ts builds it on the wire.
    expect(run((_, i) => (["no-row", "out-of-order", "no-row"] as const)[i] as PutAnswer)).toEqual({
      sent: ["putOrderedShared", "putOrdered", "putShared"],
      end: "stale",
    });
  });

  it("a statement whose commit leaves with it carries the version the put comes after; the one committed after its answer does not need it", () => {
    fc.assert(
      fc.property(fc.constantFrom(...STATEMENTS), fc.array(fc.string(), { maxLength: 5 }), fc.string(), (statement, values, after) => {
        const params = putValues(statement, values, after);
        if (COMMIT_AT[statement] === "with-statement") expect(params).toEqual([...values, after]);
        else expect(params).toEqual(values);
      }),
    );
  });

  it("WriteOrder: a put comes after the newest version the database gave the store, in whatever order the answers came; 0 before any", () => {
    fc.assert(
      fc.property(fc.array(fc.bigInt({ min: 1n, max: 2n ** 63n - 1n })), (versions) => {
        const order = new WriteOrder();
        for (const v of versions) order.saw(v.toString());
        expect(order.after()).toBe(versions.reduce((a, b) => (b > a ? b : a), 0n).toString());
      }),
    );
  });
});

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
      UNORDERED_CUT,
    ],
    [
      "after its answer, broken before it was sent",
      "after-answer",
      seen(false),
      systemError.bind(null, "ECONNRESET"),
      false,
      "StoreUnavailableError connection",
      NOT_SENT,
    ],
  ];

  it("every kind of answer and its loss, for both kinds of commit, as a table", () => {
    for (const [what, commitAt, sent, err, timedOut, expected, pinnedBy] of CASES) {
      expect(PINS, what).toContain(pinnedBy);
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
    for (const [code, detail, expected, pinnedBy] of CASES) {
      expect(PINS).toContain(pinnedBy);
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

describe("the contract: every case above is pinned by a real-server test", () => {
  it("the statements' text: the ordered ones check the version they come after ($6), putShared has no such check", () => {
    const sql = statements(quoteSchema("fenced"));
    const highest = (text: string) => Math.max(...[...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
    for (const statement of STATEMENTS) {
      // As many parameters as putValues gives it (the fence's three, key, value, and `after` for the ordered ones).
      expect(highest(sql[statement]), statement).toBe(putValues(statement, [1, 2, 3, 4, 5], 6).length);
      // Without $6 the record upsert's `after` is NULL: `r.version > NULL` is never true, so no out-of-order refusal.
      expect(sql[statement].includes("$6"), statement).toBe(statement !== "putShared");
    }
  });

  it("each named test exists in its file", () => {
    for (const [file, title] of PINS) {
      const text = readFileSync(new URL(file, import.meta.url), "utf8");
      expect(text.includes(`it("${title}`), `${file}: ${title}`).toBe(true);
    }
  });
});
