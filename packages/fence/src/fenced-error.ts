/**
 * The one error contract of the public packages (@fenced/fence, @fenced/lock, @fenced/store and
 * @fenced/gateway): every error class they export extends FencedError and carries
 *
 * - `code`, one of ERROR_CODES: what went wrong, stable across versions and messages (branch on it,
 *   or on the class, never on `message`);
 * - `applied`: whether anything of the failed call may have taken effect — `"no"` (nothing did: a
 *   retry cannot repeat it) or `"unknown"` (it may have: read back before retrying). "Nothing" is
 *   what the call was for — a record or object written, a lease granted or extended — not the
 *   ratchet: an S3 write or registration refused as stale may already have raised fence objects
 *   (its own, or another of a set's), which only ever refuses older holders (PROTOCOL.md, S3: which error a failed call throws).
 *
 * A code says nothing of HTTP: the gateway's problem table maps each code to its answer.
 */

/** Whether anything of the failed call may have taken effect. */
export type Applied = "no" | "unknown";

/** One error kind: which class throws it, and its `applied` (`either`: the throw site decides). */
export interface ErrorCodeDefinition {
  readonly thrownBy: string;
  readonly applied: Applied | "either";
  readonly meaning: string;
}

/**
 * Every error code, the one table: ErrorCode is derived from it, the gateway's problem table is
 * checked against it (a Record<ErrorCode, …>), and the packages' READMEs list it.
 */
export const ERROR_CODES = {
  INVALID_ARGUMENT: {
    thrownBy: "InvalidArgumentError",
    applied: "no",
    meaning: "a malformed argument (resource, token, holder, key, option, value), refused before any I/O",
  },
  CREDENTIAL_MALFORMED: { thrownBy: "CredentialError", applied: "no", meaning: "not a fence credential at all" },
  CREDENTIAL_INVALID: {
    thrownBy: "CredentialError",
    applied: "no",
    meaning: "a fence credential no configured key signed (unknown key id, or a bad signature)",
  },
  CREDENTIAL_EXPIRED: { thrownBy: "ExpiredCredentialError", applied: "no", meaning: "an authentic fence credential whose lease has ended" },
  SEAL_MALFORMED: { thrownBy: "SealError", applied: "no", meaning: "not a sealed string of the kind expected" },
  SEAL_INVALID: {
    thrownBy: "SealError",
    applied: "no",
    meaning: "a sealed string no configured key sealed (unknown key id, or a bad MAC)",
  },
  LOCK_NOT_ACQUIRED: {
    thrownBy: "LockNotAcquiredError",
    applied: "no",
    meaning: "acquire() reached no quorum: no lease is held (a node that did not answer drops its key at the TTL)",
  },
  TOKEN_SPACE_EXHAUSTED: {
    thrownBy: "TokenSpaceExhaustedError",
    applied: "no",
    meaning: "the resource's token counter is at 2^63 - 1: no lease can ever be granted for it",
  },
  LEASE_LOST: {
    thrownBy: "LeaseLostError",
    applied: "either",
    meaning: "the lease can no longer be trusted; unknown when nodes were asked or using()'s function ran under it",
  },
  STALE_TOKEN: {
    thrownBy: "StaleTokenError",
    applied: "no",
    meaning: "the storage has accepted a higher fencing token (or this one from another holder)",
  },
  VERSION_MISMATCH: { thrownBy: "VersionMismatchError", applied: "no", meaning: "the ifVersion precondition did not hold" },
  RESOURCE_MISMATCH: { thrownBy: "ResourceMismatchError", applied: "no", meaning: "the key belongs to another resource" },
  CONTENTION: {
    thrownBy: "ContentionError",
    applied: "no",
    meaning: "the key kept changing under the store for as many rounds as allowed",
  },
  STORE_UNAVAILABLE: {
    thrownBy: "StoreUnavailableError",
    applied: "no",
    meaning: "the backend could not be reached or did not answer in time, and the call changed nothing",
  },
  OUTCOME_UNKNOWN: {
    thrownBy: "OutcomeUnknownError",
    applied: "unknown",
    meaning: "a write was sent and its answer lost: it may or may not have been applied",
  },
  STORE_SETUP: {
    thrownBy: "StoreSetupError",
    applied: "no",
    meaning: "the backend is reachable but not set up for the store (not migrated, no bucket, no conditional writes)",
  },
  CORRUPT_STATE: {
    thrownBy: "CorruptStateError",
    applied: "no",
    meaning: "state the store wrote is not in a form it writes, or a manifest names a missing body",
  },
} as const satisfies Record<string, ErrorCodeDefinition>;

/** The closed set of error codes. */
export type ErrorCode = keyof typeof ERROR_CODES;

/** Every error code, in the table's order. */
export const ERROR_CODE_LIST = Object.keys(ERROR_CODES) as ErrorCode[];

/**
 * Marks the prototypes of the contract's classes. A registry symbol, so that an error made by
 * another copy of this package (two versions installed side by side) is recognised too.
 */
const FENCED = Symbol.for("@fenced/fence/error");

/** What FencedError's constructor takes beside Error's `cause`. */
export interface FencedErrorOptions {
  readonly cause?: unknown;
  /** Required when the code's `applied` is `either`; otherwise it defaults to the table's. */
  readonly applied?: Applied;
}

/** The `applied` of an error of `code`: the throw site's, else the table's. */
export function appliedOf(code: ErrorCode, given: Applied | undefined): Applied {
  const fixed: Applied | "either" = ERROR_CODES[code].applied;
  if (given !== undefined) return given;
  // An `either` code without a throw site's answer claims nothing: "unknown" is the safe side.
  return fixed === "either" ? "unknown" : fixed;
}

/**
 * The base of every public error of the fenced packages. `instanceof FencedError` also holds for
 * InvalidArgumentError, which stays a TypeError (see errors.ts) and carries the same members.
 */
export abstract class FencedError extends Error {
  override readonly name: string = "FencedError";
  readonly code: ErrorCode;
  readonly applied: Applied;

  protected constructor(code: ErrorCode, message: string, options: FencedErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.applied = appliedOf(code, options.applied);
  }

  /**
   * `x instanceof FencedError`: true for every error carrying the contract's mark (the subclasses,
   * and InvalidArgumentError). A subclass's own instanceof stays the ordinary prototype check.
   */
  static override [Symbol.hasInstance](value: unknown): boolean {
    if (this !== FencedError) return Function.prototype[Symbol.hasInstance].call(this, value);
    return typeof value === "object" && value !== null && (value as { [FENCED]?: unknown })[FENCED] === true;
  }
}

/** Marks a class's instances as FencedErrors (for instanceof FencedError). */
export function markFenced(prototype: object): void {
  Object.defineProperty(prototype, FENCED, { value: true });
}

markFenced(FencedError.prototype);

/**
 * How a call ended, as the packages' observers name it (span attributes, diagnostics_channel
 * messages): "ok", the error's code, or "error" for anything outside the contract. By type, never by
 * message text.
 */
export type Outcome = "ok" | ErrorCode | "error";

/** The outcome of a call that threw `err`. */
export function outcomeOf(err: unknown): Exclude<Outcome, "ok"> {
  return err instanceof FencedError ? err.code : "error";
}
