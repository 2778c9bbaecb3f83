/**
 * The bound on how long one call of a store waits for its backend (`timeoutMs`), PostgreSQL's and
 * S3's alike. One deadline per call, started when the call starts: every wait of the call is raced
 * against it (PostgreSQL: the pool, each statement, transaction()'s callback), every request an S3
 * call sends carries its signal, and the call settles when the deadline passes even if a request is
 * still held somewhere (the SDK's retry backoff is not abortable). Time the store spends waiting for
 * the caller — for a stream body to produce bytes, for update()'s function — is not counted: the
 * clock is suspended meanwhile.
 */

/** The reason a call's signal aborts when its deadline passed. Never thrown to a caller as is. */
export class DeadlineExceeded extends Error {
  override readonly name = "DeadlineExceeded";
  constructor(readonly timeoutMs: number) {
    super(`no answer within ${timeoutMs} ms`);
  }
}

/** The reason a call's signal aborts what the call left running once it returned. Never thrown to a caller. */
class CallOver extends Error {
  override readonly name = "CallOver";
  constructor() {
    super("the call is over");
  }
}

export class Deadline {
  /**
   * Why the call is over early, once it is: DeadlineExceeded, the caller's reason, or CallOver (end,
   * abandoning). Set once, never cleared: everything below reads it, the signal included.
   */
  #reason: unknown;
  #stopped = false;
  /** Made on the first ask for `signal` (S3's requests carry it; a PostgreSQL call never asks). */
  #controller: AbortController | undefined;
  /** Rejects race()'s `aborted` once the call stops: set by race()'s first call. */
  #rejectRace: ((reason: unknown) => void) | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** Milliseconds left when the clock was last started. */
  private left: number;
  private startedAt = 0;
  private suspended = 0;
  private readonly onCallerAbort = (): void => this.stop(this.caller?.reason);
  /** Rejects with the reason the call stopped: what race() races against (created by its first call). */
  private aborted: Promise<never> | undefined;

  constructor(
    readonly timeoutMs: number,
    /** The caller's own signal, if any: its abort is the caller's decision, not a timeout. */
    readonly caller: AbortSignal | undefined,
  ) {
    this.left = timeoutMs;
    if (caller?.aborted === true) this.stop(caller.reason);
    else caller?.addEventListener("abort", this.onCallerAbort, { once: true });
    this.run();
  }

  /**
   * Aborts when the deadline passes (reason: DeadlineExceeded) or the caller's signal aborts (its
   * reason), or on end(true) (CallOver). Made when first asked for, already aborted if the call stopped
   * before: an AbortController and its listener cost a call that never asks about 0.5 µs.
   */
  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.#stopped) this.#controller.abort(this.#reason);
    }
    return this.#controller.signal;
  }

  /** Whether the deadline passed (not the caller's abort). */
  get timedOut(): boolean {
    return this.#stopped && this.#reason instanceof DeadlineExceeded;
  }

  /** Whether the caller's own signal aborted the call. */
  get callerAborted(): boolean {
    return this.#stopped && !(this.#reason instanceof DeadlineExceeded);
  }

  /** Whole milliseconds left, at least 1: what PostgreSQL is told to allow a statement. */
  remainingMs(): number {
    const left = this.timer === undefined ? this.left : this.left - (performance.now() - this.startedAt);
    return Math.max(1, Math.ceil(left));
  }

  /** The call stops, for `reason`, the first time only: the signal (if made) aborts, and every race rejects. */
  private stop(reason: unknown): void {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#reason = reason;
    this.#controller?.abort(reason);
    this.#rejectRace?.(reason);
  }

  private run(): void {
    if (this.#stopped) return;
    this.startedAt = performance.now();
    // Unref'd: a pending deadline alone never keeps the process alive (a request in flight does).
    this.timer = setTimeout(() => this.stop(new DeadlineExceeded(this.timeoutMs)), Math.max(0, this.left)).unref();
  }

  /**
   * Stops the clock while the store waits for the caller (its stream, its function); the returned
   * function starts it again with what was left. Nested suspensions count: the clock runs again when
   * the last one ends.
   */
  suspend(): () => void {
    if (this.suspended++ === 0 && this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
      this.left -= performance.now() - this.startedAt;
    }
    let resumed = false;
    return () => {
      if (resumed) return;
      resumed = true;
      if (--this.suspended === 0) this.run();
    };
  }

  /**
   * Settles as `work` does, or rejects with the reason the call stopped as soon as it does, whichever
   * comes first. What `work` does after that is its own business (its requests are aborted with it).
   */
  race<T>(work: Promise<T>): Promise<T> {
    if (this.#stopped) {
      work.catch(() => undefined); // settles later; never an unhandled rejection
      const reason = this.#reason as Error; // the caller's reason may be any value: passed on as it is
      return Promise.reject(reason);
    }
    // One rejection for the whole call, however many waits it races (a PostgreSQL call races each
    // statement): a listener added and removed per wait cost twice the old per-call timer.
    if (this.aborted === undefined) {
      this.aborted = new Promise<never>((_, reject) => (this.#rejectRace = reject));
      // Nobody may be racing at the moment it stops: that rejection must not count as unhandled.
      this.aborted.catch(() => undefined);
    }
    return Promise.race([work, this.aborted]);
  }

  /**
   * The call is over: the clock stops for good. With `abandon`, what the call left running (an
   * upload it did not need in the end) is aborted now, so nothing of it outlives the call; without,
   * the signal never aborts from now on (get()'s body stream is still being read on it).
   */
  end(abandon = false): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.suspended = Number.POSITIVE_INFINITY;
    this.caller?.removeEventListener("abort", this.onCallerAbort);
    if (abandon) this.stop(new CallOver());
  }
}

/** A signal for a request no call waits for (background cleanup, an abort of an upload): it still gets an answer or gives up. */
export function requestSignal(ms: number): AbortSignal {
  return AbortSignal.timeout(ms);
}
