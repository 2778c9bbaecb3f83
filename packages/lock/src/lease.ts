import { createHash } from "node:crypto";
import { performance } from "node:perf_hooks";
import { inspect, type InspectOptions } from "node:util";
import { LeaseLostError, type HeldFence, type LeaseLostKind, type NodeFailure } from "./errors.js";
import { publishLost } from "./observe.js";
import { assertTtl } from "./options.js";

/** The operations a Lease delegates to its Redlock (kept narrow so the lease holds no client state). */
export interface LeaseOwner {
  /** The new validity, and the end it makes (Date.now() + validityMs, taken once: the lease's validUntil and what observers are told). */
  extendLease(lease: Lease, ttlMs: number): Promise<{ readonly validityMs: number; readonly validUntil: number }>;
  releaseLease(lease: Lease): Promise<void>;
}

/** What only the lock itself may do to a lease: redlock.ts imports it; index.ts does not re-export it. */
interface LeaseInternals {
  /** Marks the lease lost (the first reason wins), aborts `signal` if anyone holds it, stops the timer. */
  lose(lease: Lease, reason: LeaseLostError | "released"): void;
  /** One extension round that leaves the lease as it was when it fails (see using()'s extensionAttempts). */
  tryExtend(lease: Lease, ttlMs: number): Promise<void>;
  /** Every resource of the lease with its token, in order. */
  held(lease: Lease): readonly HeldFence[];
}

/**
 * @internal Set by Lease's static block, before any lease exists. The operations are true private
 * methods, so no code outside this package can reach them at run time: the package's exports map
 * offers index.ts only.
 */
export let leaseInternals!: LeaseInternals;

/** What a lease shows of itself when printed or serialised: what identifies it, never its value. */
interface LeaseShown<Token> {
  readonly resource: string;
  readonly token: Token;
  /** A lease of several resources only: each with its token, in order (the first is `resource`, `token`). */
  readonly fences?: readonly { readonly resource: string; readonly token: Token }[];
  readonly holder: string;
  readonly validUntil: number;
  readonly lost: boolean;
}

/**
 * One resource of a lease as a store takes it: the fence of that resource (see `Lease.fences`).
 * Besides its three fields it answers `lostReason`, the lease's, as a getter that is not enumerable:
 * a store refuses the fence of a lease that knows it ended before any I/O, as it refuses the lease
 * (refuseEndedLease in @fenced/fence), and a copy (`{ ...fence }`, structuredClone) is a plain fence.
 */
export interface LeaseFence {
  readonly resource: string;
  readonly token: bigint;
  readonly holder: string;
  /** The lease's lostReason: why it ended, or undefined while it is valid (absent on a copy). */
  readonly lostReason?: LeaseLostError | undefined;
}

/**
 * A granted lease, of one resource or of several acquired together (`redlock.acquire([...])`). Storage
 * only ever needs a fence, `{ resource, token, holder }`; the rest serves the holder.
 *
 * `fences` holds one fence per resource, in the order they were asked for: each resource has its own
 * token (monotonic per resource), all share the lease's holder. A lease of one resource is itself
 * that resource's fence (`resource`, `token`, `holder`). A lease of several has `resource` and
 * `token` of its first resource only: the stores refuse it where one fence is expected (a write must
 * name the fence it is under, `lease.fences[i]`) and take it whole where several are
 * (PostgreSQL's transaction() and putAll(), register()).
 *
 * `signal` aborts, with a LeaseLostError as reason, the moment the lease is known lost: its validity
 * ran out, an extension could not confirm a majority, or it was released. Work that must not outlive
 * the lease should watch it; writes that must not outlive it should carry the token to a fenced
 * store, which is the actual guarantee. The AbortController and its expiry timer are created on
 * first access of `signal`: a lease nobody watches costs no timer and no controller.
 */
export class Lease implements AsyncDisposable {
  /** The lease's (first) resource. */
  readonly resource: string;
  /** The (first) resource's token. */
  readonly token: bigint;
  /** Every resource the lease holds, in the order asked for. */
  readonly resources: readonly string[];
  /** One fence per resource, in the order of `resources`, each with the lease's holder. Computed on first read. */
  get fences(): readonly LeaseFence[] {
    return (this.#fences ??= Object.freeze(this.#held.map((f) => fenceOf(this, f))));
  }
  /**
   * This lease's public identity: stored by the fenced stores beside the highest token, so that an
   * equal token is accepted only from the lease that presented it. Derived one-way from `value`, so
   * any process that can extend the lease computes the same id, and the id reveals nothing of the value.
   * Computed on first read: a lease that never writes to a store never pays for the hash.
   */
  get holder(): string {
    return (this.#holder ??= holderOf(this.#value));
  }
  /**
   * This lease's random value on the nodes: a secret; extend/release touch only keys holding it.
   * Not an own property, and left out when the lease is printed or serialised (inspect, JSON):
   * handing the lease to another process as `{ resource, token, value }` reads it explicitly.
   */
  get value(): string {
    return this.#value;
  }
  readonly #value: string;
  readonly #owner: LeaseOwner;
  readonly #held: readonly HeldFence[];
  #fences: readonly LeaseFence[] | undefined;
  #holder: string | undefined;
  #validUntil: number;
  /** Monotonic deadline (performance.now() ms): wall-clock jumps on this machine neither stretch nor cut it. */
  #deadline: number;
  /** "released" stays a plain marker until someone asks for the reason: release is the hot path. */
  #lost: LeaseLostError | "released" | undefined;
  #controller: AbortController | undefined;
  #expiryTimer: NodeJS.Timeout | undefined;
  #released: Promise<void> | undefined;

  /** `held`: every resource with its token, in order (at least one; the lock checked them). */
  constructor(owner: LeaseOwner, held: readonly HeldFence[], value: string, validityMs: number) {
    const first = held[0];
    if (first === undefined) throw new RangeError("a lease holds at least one resource");
    this.#owner = owner;
    this.#held = Object.freeze(held.map((f) => Object.freeze({ resource: f.resource, token: f.token })));
    this.resource = first.resource;
    this.token = first.token;
    this.resources = Object.freeze(held.map((f) => f.resource));
    this.#value = value;
    this.#validUntil = Date.now() + validityMs;
    this.#deadline = performance.now() + validityMs;
  }

  /** Epoch ms until which the lease is valid (TTL − elapsed − drift at the last acquire/extend). */
  get validUntil(): number {
    return this.#validUntil;
  }

  /** Remaining validity in ms (0 once expired or lost). */
  get remainingMs(): number {
    return this.lostReason === undefined ? Math.max(0, Math.floor(this.#deadline - performance.now())) : 0;
  }

  /** Why the lease is lost, or undefined while it is valid. Expiry is noticed on read, not only by the timer. */
  get lostReason(): LeaseLostError | undefined {
    if (this.#lost === undefined && performance.now() >= this.#deadline) this.#lose(leaseLost(this, "expired"));
    if (this.#lost === "released") this.#lost = leaseLost(this, "released");
    return this.#lost;
  }

  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      const lost = this.lostReason;
      if (lost !== undefined) this.#controller.abort(lost);
      else this.#armExpiry();
    }
    return this.#controller.signal;
  }

  /** Extends the lease on a majority; throws LeaseLostError (and aborts `signal`) if that cannot be confirmed in time. */
  async extend(ttlMs: number): Promise<void> {
    try {
      await this.#tryExtend(ttlMs);
    } catch (err) {
      if (err instanceof LeaseLostError) this.#lose(err);
      throw err;
    }
  }

  /**
   * One extension round that leaves the lease as it was when it fails, so that using() can retry
   * (extensionAttempts) a round that failed on timeouts while the lease is still valid. Losing the
   * lease here on the first failed round would make those retries dead code.
   */
  async #tryExtend(ttlMs: number): Promise<void> {
    assertTtl(ttlMs);
    const lost = this.lostReason;
    if (lost !== undefined) throw lost;
    // A loss while the round ran, whatever the nodes answered, rejects with the lease's own reason
    // (Redlock's extendLease, so that observers see it too). One after extendLease's own check (an
    // observer of the round's success may release the lease) does here: nothing is extended then.
    const extended = await this.#owner.extendLease(this, ttlMs);
    const lostMeanwhile = this.lostReason;
    if (lostMeanwhile !== undefined) throw lostMeanwhile;
    this.#validUntil = extended.validUntil;
    this.#deadline = performance.now() + extended.validityMs;
    this.#armExpiry();
  }

  /** Releases on every node. Idempotent: later calls return the first call's promise. */
  release(): Promise<void> {
    this.#released ??= (async () => {
      this.#lose("released");
      await this.#owner.releaseLease(this);
    })();
    return this.#released;
  }

  /**
   * `await using lease = await redlock.acquire(...)` releases the lease when the block ends, however
   * it ends. Same as release(): idempotent, resolves once a majority answered.
   */
  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }

  /**
   * `{ resource, token, holder, validUntil, lost }`, the token as a decimal string (JSON has no
   * bigint): a lease in a log line or a response body shows which lease it is, never its value.
   */
  toJSON(): LeaseShown<string> {
    const { fences, ...shown } = this.#shown();
    return {
      ...shown,
      token: shown.token.toString(),
      ...(fences === undefined ? {} : { fences: fences.map((f) => ({ resource: f.resource, token: f.token.toString() })) }),
    };
  }

  /** util.inspect (console.log, most loggers): the same fields as toJSON, never the value. */
  [inspect.custom](depth: number, options: InspectOptions, show: typeof inspect): string {
    if (depth < 0) return "[Lease]";
    return `Lease ${show(this.#shown(), { ...options, depth: options.depth == null ? null : options.depth - 1 })}`;
  }

  #shown(): LeaseShown<bigint> {
    return {
      resource: this.resource,
      token: this.token,
      ...(this.#held.length > 1 ? { fences: this.#held } : {}),
      holder: this.holder,
      validUntil: this.#validUntil,
      lost: this.lostReason !== undefined,
    };
  }

  static {
    leaseInternals = {
      lose: (lease, reason) => lease.#lose(reason),
      tryExtend: (lease, ttlMs) => lease.#tryExtend(ttlMs),
      held: (lease) => lease.#held,
    };
  }

  /** Marks the lease lost (the first reason wins), aborts `signal` if anyone holds it, stops the timer. */
  #lose(reason: LeaseLostError | "released"): void {
    clearTimeout(this.#expiryTimer);
    this.#expiryTimer = undefined;
    if (this.#lost !== undefined) return;
    this.#lost = reason;
    if (reason !== "released") publishLost(reason);
    if (this.#controller !== undefined) this.#controller.abort(this.lostReason);
  }

  #armExpiry(): void {
    if (this.#controller === undefined) return;
    clearTimeout(this.#expiryTimer);
    // setTimeout runs on the monotonic clock, so a wall-clock jump on this machine does not stretch the lease.
    this.#expiryTimer = setTimeout(() => this.#lose(leaseLost(this, "expired")), Math.max(0, this.#deadline - performance.now()));
    this.#expiryTimer.unref();
  }
}

/** The public holder id of the lease whose secret value is `value`: 32 hex digits of a domain-separated SHA-256. */
export function holderOf(value: string): string {
  return createHash("sha256").update("fenced/holder\0").update(value).digest("hex").slice(0, 32);
}

/** The LeaseLostError of a lease: every resource it holds with its token, and why it is lost. */
export function leaseLost(lease: Lease, kind: LeaseLostKind, nodes: readonly NodeFailure[] = []): LeaseLostError {
  return new LeaseLostError(lease.resource, lease.token, kind, nodes, leaseInternals.held(lease));
}

/** `lease`'s fence of one resource it holds (LeaseFence): frozen, its `lostReason` the lease's. */
function fenceOf(lease: Lease, held: HeldFence): LeaseFence {
  const fence = { resource: held.resource, token: held.token, holder: lease.holder };
  Object.defineProperty(fence, "lostReason", { get: () => lease.lostReason, enumerable: false });
  return Object.freeze(fence as LeaseFence);
}
