import { FencedError } from "@fenced/fence";

/*
 * The stores' errors. Each extends FencedError (@fenced/fence): `code` names the kind, `applied`
 * whether anything of the failed call may have taken effect. None of them knows HTTP: the gateway maps
 * `code` to its answer.
 */

/**
 * A write carried a fencing token lower than the highest the storage has already accepted for the
 * same resource — or equal to it but presented by another holder (another lease that was handed the
 * same token, which only a lock that lost its counters does). Nothing was written: code
 * STALE_TOKEN, applied "no".
 */
export class StaleTokenError extends FencedError {
  override readonly name = "StaleTokenError";
  declare readonly code: "STALE_TOKEN";
  constructor(
    readonly resource: string,
    readonly token: bigint,
    readonly highest: bigint,
    /** The holder that presented `highest` (null: a fence without a holder), when the store knows it. */
    readonly highestHolder?: string | null,
  ) {
    super(
      "STALE_TOKEN",
      token === highest
        ? `fencing token ${token} for resource ${JSON.stringify(resource)} was already accepted from another holder${highestHolder == null ? "" : ` (${highestHolder})`}`
        : `stale fencing token ${token} for resource ${JSON.stringify(resource)}: the storage has accepted ${highest}`,
    );
  }
}

/**
 * The caller's `ifVersion` precondition did not hold: the record changed since it was read
 * (or does not exist). Nothing was written: code VERSION_MISMATCH, applied "no".
 */
export class VersionMismatchError extends FencedError {
  override readonly name = "VersionMismatchError";
  declare readonly code: "VERSION_MISMATCH";
  constructor(
    readonly key: string,
    readonly expected: string,
    readonly actual: string | undefined,
  ) {
    super("VERSION_MISMATCH", `version mismatch on ${JSON.stringify(key)}: expected ${expected}, found ${actual ?? "no record"}`);
  }
}

/**
 * The key belongs to another resource: it was created under `owner`, and a write, delete or
 * conditional write naming `resource` may not touch it (the ratchet of `resource` says nothing about
 * `owner`'s holders). Nothing was written: code RESOURCE_MISMATCH, applied "no". Moving a key between
 * resources is `transfer()`.
 */
export class ResourceMismatchError extends FencedError {
  override readonly name = "ResourceMismatchError";
  declare readonly code: "RESOURCE_MISMATCH";
  constructor(
    readonly key: string,
    readonly resource: string,
    readonly owner: string,
  ) {
    super("RESOURCE_MISMATCH", `key ${JSON.stringify(key)} belongs to resource ${JSON.stringify(owner)}, not ${JSON.stringify(resource)}`);
  }
}

/**
 * The store gave up: the key kept changing under it (writers racing on one key) for as many rounds as
 * it was allowed. Each round's conditional write was refused, so none of this call's data was
 * applied (a write may have raised the resource's fence to its own token, which refuses only older
 * holders): code CONTENTION, applied "no". The same call may well succeed a moment later.
 */
export class ContentionError extends FencedError {
  override readonly name = "ContentionError";
  declare readonly code: "CONTENTION";
  constructor(
    readonly key: string,
    readonly attempts: number,
    message: string,
  ) {
    super("CONTENTION", message);
  }
}

/** Which store an error came from: "postgres", "s3", or the name a store of the contract gives itself. */
export type StoreBackend = string;

/**
 * Why a backend could not serve a call, as far as the store can tell without reading message text:
 * - `refused`: the connection was refused or reset before the request was sent;
 * - `timeout`: the store's deadline (`timeoutMs`) passed before an answer came;
 * - `connection`: the connection failed or closed (socket error, server shutting down, pool exhausted);
 * - `throttled`: the backend answered "slow down" (429, SlowDown, 503) after the store's own retries.
 */
export type UnavailableReason = "refused" | "timeout" | "connection" | "throttled";

/**
 * The backend could not be reached or did not answer in time, and the call changed nothing: either
 * nothing was sent, or what was sent is known not to have been applied (a read, a statement rolled
 * back, a write refused before it applied): code STORE_UNAVAILABLE, applied "no". Safe to retry, once
 * the backend is back. (Before 0.2.0 `code` was "unavailable".)
 */
export class StoreUnavailableError extends FencedError {
  override readonly name = "StoreUnavailableError";
  declare readonly code: "STORE_UNAVAILABLE";
  constructor(
    readonly backend: StoreBackend,
    readonly reason: UnavailableReason,
    /** What the store was doing: "put", "get", "connect", "migrate" … */
    readonly operation: string,
    options?: { cause?: unknown },
  ) {
    super("STORE_UNAVAILABLE", `${backend} unavailable during ${operation}: ${reason}`, options);
  }
}

/**
 * A write was sent and its answer was lost (the connection died or the deadline passed after the
 * commit or the manifest PUT left this process): it may or may not have been applied. Read the key
 * back before retrying — a retry with the same fence is judged by the ratchet like any other write,
 * so it is safe, but it may repeat a write that did land. PostgreSQL: the read-back may still show the
 * old value while the commit is pending on the server (a paused server, a commit in flight); it
 * cannot be overtaken — every later write of the resource waits for the fence row's lock and is
 * ordered after it. Code OUTCOME_UNKNOWN, applied "unknown" (before 0.2.0 `code` was "outcome-unknown").
 */
export class OutcomeUnknownError extends FencedError {
  override readonly name = "OutcomeUnknownError";
  declare readonly code: "OUTCOME_UNKNOWN";
  constructor(
    readonly backend: StoreBackend,
    /** The key written (undefined for transaction(): the caller's statements name their own keys). */
    readonly key: string | undefined,
    readonly operation: string,
    options?: { cause?: unknown },
  ) {
    super(
      "OUTCOME_UNKNOWN",
      `${backend} ${operation}${key === undefined ? "" : ` of ${JSON.stringify(key)}`}: the answer was lost, the write may or may not have been applied; read it back`,
      options,
    );
  }
}

/**
 * The backend is reachable but not set up for this store, so no call can succeed until an operator
 * acts: `not-migrated` (PostgreSQL: the schema or its tables are missing, or older than this version
 * — run `migrate()`), `no-such-bucket` (S3), `no-such-table` (DynamoDB), `no-such-container` (Azure
 * Blob), `conditional-writes-unsupported` (a backend that ignored If-None-Match or If-Match: fencing
 * cannot be enforced on it; `verify()` diagnoses).
 * Nothing was written: code STORE_SETUP, applied "no" (before 0.2.0 `code` was "store-setup"; which
 * setup is missing is `problem`).
 */
export class StoreSetupError extends FencedError {
  override readonly name = "StoreSetupError";
  declare readonly code: "STORE_SETUP";
  constructor(
    readonly backend: StoreBackend,
    readonly problem: "not-migrated" | "no-such-bucket" | "no-such-table" | "no-such-container" | "conditional-writes-unsupported",
    message: string,
    options?: { cause?: unknown },
  ) {
    super("STORE_SETUP", message, options);
  }
}

/**
 * The store's state is not as the store left it, in one of two ways. Either state it wrote (a
 * manifest, a fence object, a record or fence row) is not in a form it writes: truncated, edited by
 * hand, or written by an incompatible version; the store refuses to judge a fence against it, so
 * nothing was written. Or (S3, `what: "body"`, from get(), getBytes() and update()) a
 * manifest names a data object that is missing — found missing twice under the same manifest
 * version, so deleted while the manifest named it; update() writes nothing. put() and delete() read
 * no body: they succeed, and replace that manifest, which heals the key. Code CORRUPT_STATE, applied
 * "no" (before 0.2.0 `code` was "corrupt-state").
 */
export class CorruptStateError extends FencedError {
  override readonly name = "CorruptStateError";
  declare readonly code: "CORRUPT_STATE";
  constructor(
    readonly backend: StoreBackend,
    /** body: the data object a manifest names is missing (S3); the others: that state is not in a form the store writes. */
    readonly what: "manifest" | "fence" | "record" | "body",
    /** The key (manifest, record) or resource (fence) whose state is corrupt. */
    readonly subject: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super("CORRUPT_STATE", message, options);
  }
}
