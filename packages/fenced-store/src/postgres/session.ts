import { Deadline, DeadlineExceeded } from "../deadline.js";
import { observedStatement } from "../observe.js";
import { refusedBeforeSending } from "../options.js";
import { callbackFailure, classify, connectionIntact, failedIn, type Phase, type Sent } from "./failures.js";
import type { CommitAt } from "./commit-at.js";
import type { PgClient, PgPool, PgQueryConfig, PgQueryResult } from "./types.js";

/**
 * What transaction()'s callback failed with, as the caller will see it: the callback's own error, or
 * the store's when the connection broke or the deadline passed while it ran. Judged by
 * Session.callback when the error is caught, so that what happens to the ROLLBACK after it cannot
 * turn the caller's error into the store's.
 */
export class CallbackError extends Error {
  override readonly name = "CallbackError";
  constructor(readonly error: unknown) {
    super("the transaction() callback failed");
  }
}

/**
 * The `rows` of a single-statement write: larger than any result the store's write statements return
 * (one row at most), so that the statement completes in one Execute. Its purpose is not the bound:
 * see Session.write, `after-answer`.
 */
const WRITE_ROWS = 2 ** 31 - 1;

/**
 * pg's JavaScript client exposes its protocol connection, an emitter of the server's messages;
 * pg-native's client and a wrapper around a client do not (then the store cannot see when a Sync left).
 */
interface Wire {
  readonly connection?: {
    on?(event: "commandComplete" | "dataRow", listener: () => void): unknown;
    removeListener?(event: "commandComplete" | "dataRow", listener: () => void): unknown;
  };
}

/** What a read's, BEGIN's or COMMIT's failure is judged by besides its phase: nothing of its answer is watched (failures.ts, Sent). */
const UNSEEN = (): Omit<Sent, "sent"> => ({ shown: false, answered: false, row: false });

/** What a store call is, for its errors. */
export interface Call {
  readonly operation: string;
  readonly key?: string | undefined;
  /** The fences a write presents, for its span and its published outcome (../observe.ts). */
  readonly fences?: readonly { readonly resource: string; readonly token: bigint; readonly holder?: string | null | undefined }[];
}

/** `work`, unless the signal aborts first (its reason); the listener is removed either way. */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return work;
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  let onAbort!: () => void;
  const aborted = new Promise<never>((_, reject) => (onAbort = () => reject(signal.reason as Error)));
  signal.addEventListener("abort", onAbort, { once: true });
  return Promise.race([work, aborted]).finally(() => signal.removeEventListener("abort", onAbort));
}

/** The error listener a checked-out client may expose (pg's clients do; a minimal wrapper need not). */
interface Emitter {
  on?(event: "error", listener: (err: Error) => void): unknown;
  removeListener?(event: "error", listener: (err: Error) => void): unknown;
}

/**
 * A client as the pool handed it over, listened to for 'error' from that moment on. pg-pool removes
 * its own (idle) listener when it hands a client out, and pool.connect()'s promise resolves only in a
 * later microtask; pg may emit 'error' before that, in the same turn: the read that brings a new
 * connection's ReadyForQuery can also bring the server's FATAL (57P01: the backend terminated, or
 * the postmaster gone, just after the start-up), and pg emits it with no query active. Unheard,
 * that 'error' would end the process. pg.Pool's callback form calls back in that turn, so the
 * listener is on before pg reads on.
 */
class Held<Client extends PgClient> {
  /** The first error the client emitted before a Session took it over. */
  error: Error | undefined;
  private readonly onError = (err: Error): void => {
    this.error ??= err;
  };

  constructor(readonly client: Client) {
    (client as Emitter).on?.("error", this.onError);
  }

  stopListening(): void {
    (this.client as Emitter).removeListener?.("error", this.onError);
  }

  /** Back to the pool unused (the call gave up): destroyed if it failed meanwhile. Released first, so the pool listens again before this stops. */
  giveBack(): void {
    this.client.release(this.error);
    this.stopListening();
  }
}

type ConnectCallback<Client> = (err: Error | null | undefined, client?: Client) => void;

/**
 * pool.connect(), in its callback form, so that the client is listened to in the turn the pool hands
 * it over (Held). A pool with only the promise form (a wrapper) returns a promise and never calls
 * back: its client is listened to once the promise resolves, as before.
 */
function checkOut<Client extends PgClient>(pool: PgPool<Client>): Promise<Held<Client>> {
  return new Promise<Held<Client>>((resolve, reject) => {
    let held: Held<Client> | undefined;
    const take = (client: Client): void => {
      held ??= new Held(client);
      resolve(held);
    };
    const connect = pool.connect.bind(pool) as unknown as (callback: ConnectCallback<Client>) => unknown;
    const returned = connect((err, client) => {
      if (err) reject(err);
      else if (client === undefined) reject(new Error("the pool's connect() called back without a client"));
      else take(client);
    });
    if (typeof (returned as PromiseLike<Client> | undefined)?.then === "function") (returned as PromiseLike<Client>).then(take, reject);
  });
}

/**
 * One client checked out of the caller's pool for one store call, held until release(). While held,
 * it listens for the client's 'error' event: pg emits it when the server dies under a checked-out
 * client, and with no listener the process would exit (the pool listens only to idle clients). A
 * client that errored, or whose state is unknown (a statement that got no answer), is released
 * with the error, so that the pool destroys it instead of handing it out again.
 */
export class Session<Client extends PgClient> {
  /** Why this connection must not be reused; set once, never cleared. */
  private broken: Error | undefined;
  private released = false;
  private readonly onError = (err: Error): void => {
    this.broken ??= err;
  };

  private constructor(
    held: Held<Client>,
    private readonly call: Call,
    private readonly deadline: Deadline,
  ) {
    this.client = held.client;
    // Takes over from the listener the client has had since the pool handed it over: an error that
    // came in between (the server's FATAL in the read that ended the start-up) breaks the session.
    (this.client as Emitter).on?.("error", this.onError);
    held.stopListening();
    this.broken = held.error;
  }

  readonly client: Client;

  /**
   * Checks a client out within the deadline, or until the caller's signal aborts (its reason is
   * thrown, as refusedBeforeSending answers it: nothing was sent); a client that arrives after the
   * call gave up goes straight back.
   * Calls.session asks the signal once more, in the turn the call's first statement is sent.
   */
  static async open<Client extends PgClient>(
    pool: PgPool<Client>,
    call: Call,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<Session<Client>> {
    // The caller's signal is not the deadline's: it ends only the wait for a client (untilAborted), and is asked between statements.
    const deadline = new Deadline(timeoutMs, undefined);
    let pending: Promise<Held<Client>> | undefined;
    try {
      pending = checkOut(pool);
      return new Session(await deadline.race(untilAborted(pending, signal)), call, deadline);
    } catch (err) {
      deadline.end();
      // No Session holds the client, whatever failed: one that arrives (or has arrived) goes back —
      // before anything of the caller's signal is read again.
      pending?.then(
        (late) => late.giveBack(),
        () => undefined,
      );
      const aborted = signal?.aborted === true && !deadline.timedOut;
      // Nothing was sent: a lease's LeaseLostError says `applied: "no"` (options.ts).
      if (aborted) throw refusedBeforeSending(signal.reason ?? err);
      throw classify(err, { ...call, phase: "connect", timedOut: deadline.timedOut });
    }
  }

  /**
   * Sends one statement, bounded by what is left of the deadline, and classifies a failure (failures.ts).
   * Nothing is sent once the deadline has passed or the connection broke: that failure is a `read`'s
   * whatever the phase, since nothing left this process — and the connection is discarded, since it
   * may be inside a transaction (a COMMIT not sent) that must not go back to the pool open.
   */
  async query<R = Record<string, unknown>>(config: PgQueryConfig, phase: Phase): Promise<PgQueryResult<R>> {
    return this.send<R>(config, { phase }, UNSEEN);
  }

  /**
   * A single-statement write (register, put, the conditional writes), in an implicit transaction:
   * PostgreSQL commits it at the Sync that follows the statement, not when the statement runs.
   * `commitAt` (commit-at.ts, COMMIT_AT, says which write takes which and why) decides when that
   * Sync leaves:
   *
   * - `with-statement`: pg sends it with the statement, in one socket write. From then on the write may
   *   commit whatever this process does, so a failure without the server's refusal is a `commit`'s:
   *   OutcomeUnknownError. A refusal (an SQLSTATE answer) leaves the connection usable, as for a read.
   * - `after-answer`: sent with `rows`, pg's JavaScript client sends the Sync only once the statement's
   *   answer (CommandComplete) has arrived. Invariant: the commit leaves this process only after the
   *   statement's answer arrived; a statement executed late, after this call gave up, never commits —
   *   the server rolls back a transaction whose client is gone — and a Sync that was sent and whose
   *   answer was lost leaves a transaction holding its locks (the record's row, the fence lock), so
   *   every later write of the key, and every raise of the resource, is ordered after it. A failure
   *   is therefore a `commit`'s only once the answer arrived with a row (the Sync went out after a
   *   write; an answer without a row wrote nothing, so its Sync commits nothing), or when the client
   *   does not show its protocol connection (pg-native, which sends the Sync with the statement and
   *   ignores `rows`; a wrapper): the store cannot tell, so the outcome is unknown (failedIn in failures.ts decides). A `read` verdict stays true: the connection is discarded with it, and
   *   released (pg writes its Terminate) before this process reads anything more from the socket, so
   *   no Sync can follow. Any failure discards the connection, an error the server answered included:
   *   pg 8 sends no Sync after an error of a query with `rows`, and the server answers nothing more
   *   until one arrives.
   */
  async write<R = Record<string, unknown>>(config: PgQueryConfig, commitAt: CommitAt): Promise<PgQueryResult<R>> {
    const wire = (this.client as Wire).connection;
    const shown = wire?.on !== undefined && wire.removeListener !== undefined;
    // Its Sync left with it: nothing of the answer needs watching (failedIn judges it by commitAt).
    if (commitAt === "with-statement") return this.send<R>(config, { commitAt }, () => ({ shown, answered: false, row: false }));
    // Whether the statement's answer arrived (the Sync may have left), and whether it carried a row:
    // what failedIn (failures.ts) judges a failure by.
    let answered = false;
    let row = false;
    const onAnswer = (): void => {
      answered = true;
    };
    const onRow = (): void => {
      row = true;
    };
    wire?.on?.("commandComplete", onAnswer);
    wire?.on?.("dataRow", onRow);
    try {
      return await this.send<R>({ ...config, rows: WRITE_ROWS }, { commitAt }, () => ({ shown, answered, row }), true);
    } finally {
      wire?.removeListener?.("commandComplete", onAnswer);
      wire?.removeListener?.("dataRow", onRow);
    }
  }

  /**
   * transaction()'s callback, raced against the deadline: past it, the connection is discarded under
   * the caller's statements. Whatever it throws (or the deadline) comes out as a CallbackError,
   * judged at once (failures.ts, callbackFailure): the callback's own error, or the store's when the
   * connection broke or the deadline passed while it ran. COMMIT is never sent after a failure.
   */
  async callback<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await this.deadline.race(work());
    } catch (err) {
      if (err instanceof DeadlineExceeded) this.discard(err);
      const context = { operation: this.call.operation, broken: this.broken !== undefined, timedOut: this.deadline.timedOut };
      throw new CallbackError(callbackFailure(err, context));
    }
  }

  /** The ROLLBACK of a transaction that will not commit. Skipped, and the connection discarded, when it cannot be trusted to answer. */
  async rollback(text: string): Promise<void> {
    if (this.broken !== undefined || this.deadline.timedOut) {
      this.discard(this.broken ?? new DeadlineExceeded(this.deadline.timeoutMs));
      return;
    }
    try {
      await this.deadline.race(observedStatement({ text }, () => this.client.query({ text })));
    } catch (err) {
      // State unknown: closing the connection rolls the transaction back on the server.
      this.discard(err);
    }
  }

  /** Makes release() destroy the connection instead of returning it to the pool. */
  discard(err: unknown): void {
    this.broken ??= err instanceof Error ? err : new Error(String(err));
  }

  /** Milliseconds left, for the server-side statement_timeout of the call's transaction. */
  remainingMs(): number {
    return this.deadline.remainingMs();
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.deadline.end();
    (this.client as Emitter).removeListener?.("error", this.onError);
    this.client.release(this.broken);
  }

  /**
   * query() and write(): a failure is judged by failedIn (failures.ts) from `statement` and what
   * `seen` says had arrived when it failed. `discardOnError`: whatever the failure, the connection goes.
   */
  private async send<R>(
    config: PgQueryConfig,
    statement: { readonly phase: Phase } | { readonly commitAt: CommitAt },
    seen: () => Omit<Sent, "sent">,
    discardOnError = false,
  ): Promise<PgQueryResult<R>> {
    if (this.deadline.timedOut || this.broken !== undefined) {
      const err = this.broken ?? new DeadlineExceeded(this.deadline.timeoutMs);
      this.discard(err);
      throw this.failure(err, failedIn(statement, { ...seen(), sent: false }));
    }
    try {
      return await this.deadline.race(observedStatement(config, () => this.client.query<R>(config)));
    } catch (err) {
      // No answer from the server (or one that ended the session): the connection's state is unknown.
      if (discardOnError || !connectionIntact(err)) this.discard(err);
      throw this.failure(err, failedIn(statement, { ...seen(), sent: true }));
    }
  }

  private failure(err: unknown, phase: Phase): unknown {
    return classify(err, { ...this.call, phase, timedOut: this.deadline.timedOut });
  }
}
