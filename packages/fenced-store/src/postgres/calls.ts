import type { CheckedFence } from "@fenced/fence/internal";
import type { StaleTokenError } from "../errors.js";
import { observedCall } from "../observe.js";
import { refuseAborted } from "../options.js";
import { staleError } from "./inspect.js";
import { CallbackError, Session, type Call } from "./session.js";
import { COMMIT_AT, type SingleStatementWrite } from "./commit-at.js";
import { ownParams } from "./own-sql.js";
import { beginWithin, COMMIT, type NamedStatement, ROLLBACK, statementNames, type Statements } from "./sql.js";
import type { PgClient, PgParam, PgPool, PgQueryConfig, PgQueryResult } from "./types.js";

/** The fence's three leading parameters of every write statement. */
export const fenceParams = (fence: CheckedFence): PgParam[] => [fence.resource, fence.token.toString(), fence.holder];

/**
 * The conditional record writes, each with what is sent before it, first first: the one-row statement
 * when the key is its fence's resource (own-sql.ts), then the write at the fence the row already
 * holds, under the shared fence lock (fence-lock.ts). The unconditional put's statements are nextPut's
 * (write-order.ts).
 */
const SENT_BEFORE = {
  putIfVersion: { own: "putOwnIfVersion", shared: "putIfVersionShared" },
  deleteIfVersion: { own: "deleteOwnIfVersion", shared: "deleteIfVersionShared" },
} as const satisfies Partial<Record<SingleStatementWrite, { own: SingleStatementWrite; shared: SingleStatementWrite }>>;

/** inTransaction()'s options: whether to commit a result. */
export interface TransactionOptions<T> {
  readonly commit?: (result: T) => boolean;
}

/**
 * How FencedPostgres runs a call: a session on a client of the pool (session.ts), the store's
 * transactions, and its statements by name. Shared by the single-fence operations (store.ts) and
 * those of several fences (batch.ts).
 */
export class Calls<Client extends PgClient> {
  private readonly names: Record<NamedStatement, string>;

  constructor(
    private readonly pool: PgPool<Client>,
    /** The deadline of every call, in milliseconds. */
    readonly timeoutMs: number,
    readonly sql: Statements,
  ) {
    // Named (prepared) statements skip parse and plan after the first use on each connection.
    this.names = statementNames(sql);
  }

  /**
   * Runs `work` on a client checked out for this call, within the call's deadline; the client is
   * released however it ends. `signal` is the caller's (undefined: none), asked for by every call so
   * that none can leave it out: waiting for the client ends at its abort (Session.open), and `work`
   * never starts once it has aborted — nothing is sent, so the abort is refuseAborted's (a lease's
   * LeaseLostError says `applied: "no"`).
   */
  session<T>(call: Call, signal: AbortSignal | undefined, work: (s: Session<Client>) => Promise<T>): Promise<T> {
    return observedCall({ store: "postgres", ...call }, async () => {
      const s = await Session.open(this.pool, call, this.timeoutMs, signal);
      try {
        // Asked here, in the turn `work` starts and sends its first statement: an abort that came with
        // the client, or while this call resumed, sends nothing — refused as before any I/O.
        refuseAborted(signal);
        return await work(s);
      } finally {
        s.release();
      }
    });
  }

  /**
   * BEGIN; work; COMMIT — or ROLLBACK if work throws, `commit` declines its result, or the signal was
   * aborted. The signal is checked before every statement the operation sends and last before
   * COMMIT: an abort is honoured at the next statement boundary, never inside a statement, and COMMIT
   * is not sent — nothing of the call commits, so the abort is refuseAborted's (a lease's
   * LeaseLostError says `applied: "no"`). COMMIT is the only statement whose lost answer leaves the
   * outcome unknown; it is never sent after a failure.
   */
  inTransaction<T>(
    call: Call,
    signal: AbortSignal | undefined,
    work: (s: Session<Client>) => Promise<T>,
    options: TransactionOptions<T> = {},
  ): Promise<T> {
    return this.session(call, signal, (s) => this.transaction(s, signal, work, options));
  }

  /** inTransaction() on a session already open: the same transaction, after whatever the call sent first. */
  async transaction<T>(
    s: Session<Client>,
    signal: AbortSignal | undefined,
    work: (s: Session<Client>) => Promise<T>,
    options: TransactionOptions<T> = {},
  ): Promise<T> {
    const { commit = () => true } = options;
    // Before BEGIN: whatever the session sent before it (putAll's refused statement) wrote nothing.
    refuseAborted(signal);
    let begun = false;
    try {
      await s.query({ text: beginWithin(s.remainingMs()) }, "read");
      begun = true;
      const result = await work(s);
      // The last moment at which nothing is written: an abort rolls back (the catch below), and COMMIT
      // is never sent — a ROLLBACK that fails discards the connection, which rolls back too. `work`'s
      // statements, the caller's in transaction() included, commit only with this COMMIT.
      refuseAborted(signal);
      if (!commit(result)) {
        begun = false;
        // Nothing to keep: a ROLLBACK that fails leaves a discarded connection, which rolls back too.
        await s.rollback(ROLLBACK);
        return result;
      }
      begun = false;
      const done = await s.query({ text: COMMIT }, "commit");
      // A transaction in which a statement failed (and the error was swallowed) "commits" as ROLLBACK.
      if (done.command !== "COMMIT")
        throw new Error(`the transaction was rolled back by the server (${done.command}); nothing was written`);
      return result;
    } catch (err) {
      if (begun) await s.rollback(ROLLBACK);
      // The callback's error was judged when it was caught (Session.callback), before this ROLLBACK.
      throw err instanceof CallbackError ? err.error : err;
    }
  }

  /**
   * One statement of a multi-statement operation, always inside `transaction`'s BEGIN … COMMIT: not
   * sent once the signal is aborted. The abort then rolls the transaction back (COMMIT is never sent
   * after a throw), so nothing of the call commits: refuseAborted.
   */
  run<R = Record<string, unknown>>(
    s: Session<Client>,
    signal: AbortSignal | undefined,
    name: NamedStatement,
    values: PgParam[],
  ): Promise<PgQueryResult<R>> {
    refuseAborted(signal);
    // Before COMMIT: a failure here leaves nothing applied.
    return s.query<R>(this.query(name, values), "read");
  }

  /** A single-statement write, its commit sent when COMMIT_AT says (Session.write). */
  write<R = Record<string, unknown>>(s: Session<Client>, name: SingleStatementWrite, values: PgParam[]): Promise<PgQueryResult<R>> {
    return s.write<R>(this.query(name, values), COMMIT_AT[name]);
  }

  /**
   * A conditional record write under one fence: the statements of SENT_BEFORE, then `name`, each sent
   * only when the one before wrote nothing (no row), in a new implicit transaction. Each of the
   * statements before `name` writes only what `name` would write for a fence the rows already hold,
   * and decides nothing else, so the outcome is the same whichever writes; only the locks differ:
   * - `own` (only when `own` is true: the key is the fence's resource) takes the record's row alone;
   * - `shared` takes the shared fence lock and the fence row FOR SHARE, one lease's writes side by
   *   side (fence-lock.ts); never upgraded: `name` raises the row, or finds the fence stale (zero
   *   rows), exactly as it always decided.
   * An abort is honoured before each next statement, as between any two, and answered as one before
   * any I/O (refuseAborted: a lease's LeaseLostError says `applied: "no"`): the statement before it
   * answered no row, so it wrote nothing, and its commit went with it.
   */
  async fencedWrite<R = Record<string, unknown>>(
    s: Session<Client>,
    signal: AbortSignal | undefined,
    name: keyof typeof SENT_BEFORE,
    values: PgParam[],
    own: boolean,
  ): Promise<PgQueryResult<R>> {
    const { own: first, shared } = SENT_BEFORE[name];
    const before: [SingleStatementWrite, PgParam[]][] = own
      ? [
          [first, ownParams(values)],
          [shared, values],
        ]
      : [[shared, values]];
    for (const [statement, params] of before) {
      const result = await this.write<R>(s, statement, params);
      if (result.rows.length > 0) return result;
      refuseAborted(signal);
    }
    return this.write<R>(s, name, values);
  }

  /** The key's row as it is now, tombstones included; read inside the operation's transaction. */
  async current(
    s: Session<Client>,
    signal: AbortSignal | undefined,
    key: string,
  ): Promise<{ version: string; resource: string; deleted: boolean } | undefined> {
    const { rows } = await this.run<{ version: string; resource: string; deleted: boolean }>(s, signal, "current", [key]);
    const row = rows[0];
    return row === undefined ? undefined : { version: String(row.version), resource: row.resource, deleted: row.deleted };
  }

  /** Called after the ratchet refused: the error says what it was refused for (inspect.ts). */
  staleError(s: Session<Client>, fence: CheckedFence): Promise<StaleTokenError> {
    return staleError(s, this.query("highest", [fence.resource]), fence);
  }

  query(name: NamedStatement, values: PgParam[]): PgQueryConfig {
    return { name: this.names[name], text: this.sql[name], values };
  }
}
