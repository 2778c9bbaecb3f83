import { readFileSync } from "node:fs";

// The real-server tests that the server-free tests of the PostgreSQL writer's decisions name
// (put-statements.test.ts, failure-verdicts.test.ts): each case there says which of these shows the
// same behaviour on the wire, so that an in-memory case never stands alone.

/** A test, by file (relative to this folder) and title: the real-server test that shows a case on the wire. */
export type Pin = readonly [file: string, title: string];

/** Every pin defined below, each checked by missingPins(). */
const defined: Pin[] = [];
function pin(file: string, title: string): Pin {
  const made: Pin = [file, title];
  defined.push(made);
  return made;
}

export const STEADY = pin(
  "write-order.test.ts",
  "steady state, a new lease's first write, an out-of-order refusal, a key of another resource, and the worst case",
);
export const ALL_LAND = pin(
  "write-order.test.ts",
  "all land: those refused as out of order (they came after the same version) are sent again unordered",
);
export const ARTICLE = pin(
  "store.test.ts",
  "token 33 reads and pauses, 34 writes, 33 resumes and writes: 33 is refused and 34's value stays",
);
// The conformance suite's case, which servers.test.ts runs on PostgreSQL.
export const OWNERSHIP = pin(
  "../conformance/rules-test-support.ts",
  "put, delete and ifVersion put under another resource are refused whatever its token",
);
export const ORDERED_LOST = pin("outcomes.test.ts", "put(): sent ordered with its commit, the answer cut: OutcomeUnknownError, it landed");
export const UNORDERED_CUT = pin(
  "outcomes.test.ts",
  "put(): refused as out of order, sent unordered, its statement ran and the answer was cut before its commit (Sync) was sent",
);
export const EMPTY_SYNC_LOST = pin(
  "outcomes.test.ts",
  "put() refused as out of order, then sent unordered: its zero-row answer came, the answer to its Sync was cut",
);
export const ROW_SYNC_LOST = pin(
  "in-doubt.test.ts",
  "an unordered put (after its answer) that wrote, the answer to its Sync lost: OutcomeUnknownError and it landed, every time",
);
export const WRAPPED = pin("in-doubt.test.ts", "through a pool whose clients do not show pg's protocol connection (a wrapper)");
export const PAST_DEADLINE = pin(
  "in-doubt.test.ts",
  "an unconditional put waiting on the fence row past the deadline: OutcomeUnknownError",
);
export const SERVER_DIED = pin(
  "faults.test.ts",
  "put(): waiting for the fence row lock, its commit (Sync) sent with it: OutcomeUnknownError",
);
export const PAUSED = pin("faults.test.ts", "get, put and transaction each end in a typed error within timeoutMs");
export const NOT_SENT = pin(
  "outcomes.test.ts",
  "a put's next statement on a connection the server terminated between two statements: not sent, StoreUnavailableError",
);
export const NOT_MIGRATED = pin("outcomes.test.ts", "every operation fails with StoreSetupError not-migrated");
// Not reachable on the wire, so pinned by the statement's text (put-statements.test.ts): putShared carries no `after`.
export const SQL_TEXT = pin(
  "put-statements.test.ts",
  "the statements' text: the ordered ones check the version they come after ($6), putShared has no such check",
);
export const OWN_STEADY = pin(
  "own-path.test.ts",
  "a lease writing its own key: its first write raises the fence row, every later one is one UPDATE of the record",
);
export const OWN_LOST = pin(
  "own-path.test.ts",
  "the one-row put, its answer cut after its commit was sent: OutcomeUnknownError, and it landed",
);
// Not reachable on the wire: the one-row statements raise nothing (put-statements.test.ts reads their text).
export const OWN_TEXT = pin(
  "put-statements.test.ts",
  "the one-row statements: one UPDATE of the record that locks no fence row, never raises, and takes the parameters of the write it stands in front of",
);
export const CONDITIONAL = pin(
  "conditional.test.ts",
  "put and delete with ifVersion send one statement, with no transaction of their own, written or refused for owner or version",
);
export const NEVER_WRITTEN = pin("conditional.test.ts", "on a key never written, or deleted, ifVersion is refused with no actual version");
export const PUT_ALL = pin(
  "batch.test.ts",
  "one statement when nothing is refused; refused in any way, nothing written and the transaction that follows names it",
);
// LATE_DELIVERED: named by put-statements.test.ts's comments on putValues and WriteOrder (a late put
// refused by the version it came after), where no table row holds it; checked like every pin.
pin("in-doubt.test.ts", "delayed on the network past the deadline, then delivered: each finds the holder's later write and is refused");

/** The pins defined here whose test is not in its file (of this folder, or relative to it) under that title (or a title it begins): none, when the contract holds. */
export function missingPins(): string[] {
  return defined
    .filter(([file, title]) => !readFileSync(new URL(file, import.meta.url), "utf8").includes(`it("${title}`))
    .map(([file, title]) => `${file}: ${title}`);
}
