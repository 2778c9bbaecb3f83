import { checkFence, FencedError, InvalidArgumentError } from "@fenced/fence";
import { checkFences, refuseEndedLease, type CheckedFence } from "@fenced/fence/internal";

/**
 * The argument checks both backends share, one definition each. Each reads every field once and
 * returns copies, so a caller that mutates its objects (or a getter that changes its answer) during
 * the call cannot show the check one value and the storage another. Argument names are given as the
 * caller wrote them: `options.fence.token`, `options.signal`.
 */

/** The options object itself; InvalidArgumentError naming the expected shape otherwise. */
export function optionsObject(options: unknown, shape: string, argument = "options"): Record<string, unknown> {
  if (typeof options !== "object" || options === null) throw new InvalidArgumentError(argument, `must be an object ${shape}`);
  return options as Record<string, unknown>;
}

/**
 * A fence checked and copied (checkFence), and refused with its own error if it knows its lease
 * ended (refuseEndedLease: a released or expired Lease, or one of its lease.fences), whether or not a
 * signal was passed too.
 * Every operation that takes a fence reads it through here, before any I/O.
 */
export function liveFence(fence: unknown, argument = "fence"): CheckedFence {
  const checked = checkFence(fence, argument);
  refuseEnded(fence);
  return checked;
}

/**
 * refuseEndedLease, its error answered as refusedBeforeSending's: every store operation reads its
 * fences through here before any I/O, so nothing was sent.
 */
function refuseEnded(fence: unknown): void {
  try {
    refuseEndedLease(fence);
  } catch (err) {
    throw refusedBeforeSending(err);
  }
}

/**
 * A call refused before anything of it was committed — nothing sent, or only what will never commit
 * (a transaction that rolls back) — because of `err` (a lease's LeaseLostError, the reason its
 * signal aborted with): a new error of the same class saying so — `applied: "no"`, `err` as its
 * `cause` — since `err` itself says what the lease knows (its `applied` is "unknown" whenever nodes
 * were asked). `err` is shared by everyone holding the lease, so it is copied, never changed.
 * Only a lease's error (code LEASE_LOST) is copied: any other reason a signal aborted with (a
 * user's own, an OutcomeUnknownError passed on) is answered as it is, so that its `applied` keeps
 * what its code says and the reason thrown is the signal's own object.
 */
export function refusedBeforeSending(err: unknown): unknown {
  if (!(err instanceof FencedError) || err.code !== "LEASE_LOST" || err.applied === "no") return err;
  const copy = Object.create(Object.getPrototypeOf(err) as object) as FencedError;
  Object.defineProperties(copy, Object.getOwnPropertyDescriptors(err));
  Object.defineProperty(copy, "applied", { value: "no", enumerable: true, writable: false, configurable: true });
  Object.defineProperty(copy, "cause", { value: err, enumerable: false, writable: true, configurable: true });
  Error.captureStackTrace(copy, refusedBeforeSending);
  return copy;
}

/**
 * Several fences checked and copied in the order given (checkFences: an array of fences, or an
 * object carrying them as `fences`, a @fenced/lock Lease; none twice for one resource, at most
 * MAX_RESOURCES), and refused before any I/O if one knows its lease ended (refuseEndedLease): the
 * lease object itself when one is passed, then each fence. A lease's `fences` is read once, so the
 * fences checked are the ones asked.
 */
export function liveFences(value: unknown, argument = "fences"): CheckedFence[] {
  const lease = isFenceSet(value) ? value : undefined;
  const list: unknown = lease === undefined ? value : lease.fences;
  const checked = checkFences(lease === undefined ? list : { fences: list }, argument);
  if (lease !== undefined) refuseEnded(lease);
  for (const fence of list as readonly unknown[]) refuseEnded(fence);
  return checked;
}

/**
 * What the calls that take one fence or several read their first argument as: an array, or an object
 * with `fences` (a Lease, of one resource or several), is liveFences'; anything else is one fence
 * (liveFence). A Lease of one resource thus gives the same single fence either way.
 */
export function oneOrMoreFences(value: unknown, argument = "fence"): CheckedFence[] {
  return Array.isArray(value) || isFenceSet(value) ? liveFences(value, argument) : [liveFence(value, argument)];
}

/** An object (not an array) with a `fences` property: a lease, or a set of fences presented as one. */
function isFenceSet(value: unknown): value is { readonly fences?: unknown } {
  return typeof value === "object" && value !== null && !Array.isArray(value) && "fences" in value;
}

/** Anything with AbortSignal's shape: an `aborted` flag and `addEventListener` (a polyfill or another realm's signal passes). */
export function checkSignal(signal: unknown, argument = "options.signal"): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  const s: { aborted?: unknown; addEventListener?: unknown } | null = typeof signal === "object" ? signal : null;
  if (s === null || typeof s.aborted !== "boolean" || typeof s.addEventListener !== "function") {
    throw new InvalidArgumentError(argument, "must be an AbortSignal");
  }
  return signal as AbortSignal;
}

/**
 * Throws if the signal has been aborted: checked before each request or statement is sent, only where
 * nothing of the call was or will be committed — before any I/O, or inside a transaction that the
 * throw rolls back. It throws the signal's reason, a lease's LeaseLostError (its signal aborts with
 * it) answered as refusedBeforeSending's.
 */
export function refuseAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted === true) throw refusedBeforeSending(signal.reason ?? new DOMException("This operation was aborted", "AbortError"));
}

/** The optional `{ signal? }` of register() and transaction(). */
export function signalOnly(options: unknown): AbortSignal | undefined {
  if (options === undefined) return undefined;
  return checkSignal(optionsObject(options, "{ signal? }").signal);
}

export interface CheckedTransferFences {
  readonly from: CheckedFence;
  readonly to: CheckedFence;
}

/** transfer()'s two fences: both valid, naming two different resources (within one there is nothing to move). */
export function transferFences(from: unknown, to: unknown): CheckedTransferFences {
  const source = liveFence(from, "options.from");
  const target = liveFence(to, "options.to");
  if (source.resource === target.resource)
    throw new InvalidArgumentError("options.to.resource", "must differ from options.from.resource: a key already belongs to its owner");
  return { from: source, to: target };
}

/** Default deadline of every store call (timeoutMs), PostgreSQL's and S3's alike. */
export const DEFAULT_TIMEOUT_MS = 5_000;
export const MIN_TIMEOUT_MS = 100;
export const MAX_TIMEOUT_MS = 600_000;

/**
 * A duration option: whole milliseconds within [min, max], `fallback` when absent; otherwise
 * InvalidArgumentError naming `name`.
 */
export function milliseconds(name: string, value: unknown, min: number, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min || value > max)
    throw new InvalidArgumentError(
      name,
      `must be an integer number of milliseconds from ${min} to ${max}, got ${typeof value === "number" ? value : typeof value}`,
    );
  return value;
}

/** A store's `timeoutMs`: whole milliseconds within [MIN_TIMEOUT_MS, MAX_TIMEOUT_MS]; DEFAULT_TIMEOUT_MS when absent. */
export function timeoutOption(timeoutMs: unknown, argument: string): number {
  return milliseconds(argument, timeoutMs, MIN_TIMEOUT_MS, MAX_TIMEOUT_MS, DEFAULT_TIMEOUT_MS);
}
