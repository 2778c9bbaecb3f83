import { DeadlineExceeded } from "../deadline.js";
import { OutcomeUnknownError, StoreSetupError, StoreUnavailableError, type UnavailableReason } from "../errors.js";
import type { CommitAt } from "./commit-at.js";

/**
 * How a failure of the driver (pg) becomes one of the store's errors: the one place that decides, used
 * by every call. It reads only the error's type, its SQLSTATE and its Node system code — never its
 * message — and what the store itself knows: which phase the call was in, and whether the call's
 * deadline (timeoutMs) had passed.
 *
 * The phase says what a lost answer could mean:
 * - `connect`: waiting for a pool client. Nothing was sent.
 * - `read`: a statement that cannot have changed anything on its own: a read, BEGIN, or a statement
 *   of a transaction whose commit has not been sent — the COMMIT of a transaction, or the Sync of a
 *   put sent unordered (after an out-of-order refusal), which the store sends only once the
 *   statement's answer has arrived (Session.write, `after-answer`). A transaction that never commits
 *   is rolled back, by ROLLBACK or by the server when the connection closes.
 * - `commit`: the commit (COMMIT, or a single-statement write's Sync) may have left this process —
 *   for every other single-statement write, from the moment the statement is sent, since its Sync
 *   goes with it (`with-statement`). From here a lost answer may hide a write that was applied.
 *
 * The rule:
 * 1. The server answered with an SQLSTATE (a pg DatabaseError: a five-character `code` and a
 *    `severity`):
 *    - 3F000 (no such schema), 42P01 (no such table or sequence), 42703 (no such column), 42883 (no
 *      such function), raised by the store's own statements outside migrate(): StoreSetupError
 *      "not-migrated". The statement did not run.
 *    - class 08 (connection exception), 53 (insufficient resources), 57 (operator intervention:
 *      shutdown, crash of another backend, cancel), 58 (system error), XX (internal error): the
 *      session ended or the statement was cut short by the server rather than refused. In the
 *      `commit` phase that may have come after the commit record: OutcomeUnknownError. Before it:
 *      StoreUnavailableError — "timeout" for 57014 (a cancel: the store's `statement_timeout`),
 *      "refused" while connecting (the server turned the session away: starting up, shutting down,
 *      too many connections), else "connection".
 *    - anything else (a refusal the store recognises, FN001/FN002, a constraint, a bad password, a
 *      missing database): the statement failed as a whole and nothing was applied; the error passes
 *      through unchanged for the caller (or the store's refusal mapping) to read.
 * 2. No SQLSTATE (a socket error with a Node system code, pg's own "Connection terminated …" or a
 *    client that is no longer queryable, which carry no code, or the store's own deadline):
 *    - in the `commit` phase: OutcomeUnknownError;
 *    - else, if the call's deadline had passed: StoreUnavailableError "timeout";
 *    - else while connecting: "refused" for ECONNREFUSED and ENOENT (no server listening on the port or
 *      socket), "timeout" for ETIMEDOUT, "connection" for any other;
 *    - else "connection".
 */
export type Phase = "connect" | "read" | "commit";

/**
 * What a statement that failed had sent, and what of its answer had arrived (Session.send and
 * Session.write observe it; pg's protocol events `dataRow` and `commandComplete`).
 */
export interface Sent {
  /** Whether the statement left this process: false when the deadline had passed or the connection broke before it. */
  readonly sent: boolean;
  /** Whether the client shows pg's protocol connection; false for pg-native or a wrapper. */
  readonly shown: boolean;
  /** Whether the statement's answer (CommandComplete) arrived. */
  readonly answered: boolean;
  /** Whether a row of it arrived. */
  readonly row: boolean;
}

/**
 * The phase a failed statement is judged in: `phase` for a read, BEGIN or COMMIT, or a single-
 * statement write by when its commit (the Sync) leaves (commit-at.ts, COMMIT_AT):
 * - nothing sent: `read`, whatever the statement (nothing left this process);
 * - `with-statement`: the Sync left with the statement — `commit`;
 * - `after-answer`: the Sync leaves only once the answer arrived, so `commit` only once it arrived
 *   with a row (a statement of this kind returns a row if and only if it wrote; a Sync after no row
 *   commits nothing), or when the client does not show its protocol connection (the store cannot see
 *   when the Sync left); else `read`.
 */
export function failedIn(statement: { readonly phase: Phase } | { readonly commitAt: CommitAt }, seen: Sent): Phase {
  if (!seen.sent) return "read";
  if ("phase" in statement) return statement.phase;
  if (statement.commitAt === "with-statement" || !seen.shown) return "commit";
  return seen.answered && seen.row ? "commit" : "read";
}

export interface FailureContext {
  readonly phase: Phase;
  /** The store method: "put", "get", "transaction", "migrate" … */
  readonly operation: string;
  /** The key the call writes or reads; undefined for register(), transaction() and migrate(). */
  readonly key?: string | undefined;
  /** Whether the call's deadline had passed when the failure arrived. */
  readonly timedOut: boolean;
}

/** SQLSTATEs of a store object that does not exist: migrate() has not run (or not this version's). */
const NOT_MIGRATED = new Set(["3F000", "42P01", "42703", "42883"]);

/** SQLSTATE classes in which the server ended the session or cut the statement short. */
const SESSION_ENDED = new Set(["08", "53", "57", "58", "XX"]);

/** The server's answer: pg's DatabaseError, recognised by shape (the store does not import pg). */
export function sqlState(err: unknown): string | undefined {
  if (!(err instanceof Error)) return undefined;
  const { code, severity } = err as { code?: unknown; severity?: unknown };
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) && typeof severity === "string" ? code : undefined;
}

/** The error to throw for a failure of the driver in the given context (see the rule above). */
export function classify(err: unknown, context: FailureContext): unknown {
  const { phase, operation, key, timedOut } = context;
  const unavailable = (reason: UnavailableReason) => new StoreUnavailableError("postgres", reason, operation, { cause: err });
  const state = sqlState(err);
  if (state !== undefined) {
    if (NOT_MIGRATED.has(state) && operation !== "migrate")
      return new StoreSetupError(
        "postgres",
        "not-migrated",
        `the store's tables are missing or older than this version (SQLSTATE ${state}): run migrate()`,
        { cause: err },
      );
    if (!SESSION_ENDED.has(state.slice(0, 2))) return err;
    if (phase === "commit") return new OutcomeUnknownError("postgres", key, operation, { cause: err });
    if (state === "57014") return unavailable("timeout");
    return unavailable(phase === "connect" ? "refused" : "connection");
  }
  if (phase === "commit") return new OutcomeUnknownError("postgres", key, operation, { cause: err });
  if (timedOut || err instanceof DeadlineExceeded) return unavailable("timeout");
  if (phase === "connect") {
    const code = (err as { code?: unknown } | null)?.code;
    if (code === "ECONNREFUSED" || code === "ENOENT") return unavailable("refused");
    if (code === "ETIMEDOUT") return unavailable("timeout");
  }
  return unavailable("connection");
}

/**
 * What an error thrown by transaction()'s callback becomes, judged when it is caught (before the
 * ROLLBACK, whose fate does not change it): the callback's own error, unchanged — its own SQL errors
 * included — unless the call failed for the store's reasons while the callback ran: the connection
 * broke (`broken`), the deadline passed, or the server cancelled the caller's statement on the
 * `statement_timeout` the store set to that deadline (57014, which may arrive just before the
 * deadline fires here). Then StoreUnavailableError, the callback's error as its cause. Either way
 * nothing was committed.
 */
export function callbackFailure(err: unknown, context: { operation: string; broken: boolean; timedOut: boolean }): unknown {
  const timedOut = context.timedOut || sqlState(err) === "57014";
  if (!context.broken && !timedOut) return err;
  return new StoreUnavailableError("postgres", timedOut ? "timeout" : "connection", context.operation, { cause: err });
}

/** Whether the connection is known to be in a usable state after this failure: the server answered it. */
export function connectionIntact(err: unknown): boolean {
  const state = sqlState(err);
  return state !== undefined && !SESSION_ENDED.has(state.slice(0, 2));
}
