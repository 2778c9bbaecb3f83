/**
 * A write carried a fencing token lower than the highest the storage has already accepted for the
 * same resource — or equal to it but presented by another holder (another lease that was handed the
 * same token, which only a lock that lost its counters does). Nothing was written. HTTP: 409.
 */
export class StaleTokenError extends Error {
  override readonly name = "StaleTokenError";
  readonly status = 409;
  constructor(
    readonly resource: string,
    readonly token: bigint,
    readonly highest: bigint,
    /** The holder that presented `highest` (null: a fence without a holder), when the store knows it. */
    readonly highestHolder?: string | null,
  ) {
    super(
      token === highest
        ? `fencing token ${token} for resource ${JSON.stringify(resource)} was already accepted from another holder${highestHolder == null ? "" : ` (${highestHolder})`}`
        : `stale fencing token ${token} for resource ${JSON.stringify(resource)}: the storage has accepted ${highest}`,
    );
  }
}

/**
 * The caller's `ifVersion` precondition did not hold: the record changed since it was read
 * (or does not exist). Nothing was written. HTTP: 412.
 */
export class VersionMismatchError extends Error {
  override readonly name = "VersionMismatchError";
  readonly status = 412;
  constructor(
    readonly key: string,
    readonly expected: string,
    readonly actual: string | undefined,
  ) {
    super(`version mismatch on ${JSON.stringify(key)}: expected ${expected}, found ${actual ?? "no record"}`);
  }
}

/**
 * The key belongs to another resource: it was created under `owner`, and a write, delete or
 * conditional write naming `resource` may not touch it (the ratchet of `resource` says nothing about
 * `owner`'s holders). Nothing was written. Moving a key between resources is `transfer()`. HTTP: 409.
 */
export class ResourceMismatchError extends Error {
  override readonly name = "ResourceMismatchError";
  readonly status = 409;
  constructor(
    readonly key: string,
    readonly resource: string,
    readonly owner: string,
  ) {
    super(`key ${JSON.stringify(key)} belongs to resource ${JSON.stringify(owner)}, not ${JSON.stringify(resource)}`);
  }
}

/**
 * The store gave up: the key kept changing under it (writers racing on one key) for as many rounds as
 * it was allowed. Nothing of this call was acknowledged; the same call may well succeed a moment
 * later. HTTP: 503.
 */
export class ContentionError extends Error {
  override readonly name = "ContentionError";
  readonly status = 503;
  constructor(
    readonly key: string,
    readonly attempts: number,
    message: string,
  ) {
    super(message);
  }
}

/** Which backend an error came from. */
export type StoreBackend = "postgres" | "s3";

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
 * back, a write refused before it applied). Safe to retry, once the backend is back. HTTP: 503 with
 * Retry-After.
 */
export class StoreUnavailableError extends Error {
  override readonly name = "StoreUnavailableError";
  readonly code = "unavailable";
  readonly status = 503;
  constructor(
    readonly backend: StoreBackend,
    readonly reason: UnavailableReason,
    /** What the store was doing: "put", "get", "connect", "migrate" … */
    readonly operation: string,
    options?: { cause?: unknown },
  ) {
    super(`${backend} unavailable during ${operation}: ${reason}`, options);
  }
}

/**
 * A write was sent and its answer was lost (the connection died or the deadline passed after the
 * commit or the manifest PUT left this process): it may or may not have been applied. Read the key
 * back before retrying — a retry with the same fence is judged by the ratchet like any other write,
 * so it is safe, but it may repeat a write that did land. PostgreSQL: the read-back may still show the
 * old value while the commit is pending on the server (a paused server, a commit in flight); it
 * cannot be overtaken — every later write of the resource waits for the fence row's lock and is
 * ordered after it. HTTP: 503, `/problems/outcome-unknown`.
 */
export class OutcomeUnknownError extends Error {
  override readonly name = "OutcomeUnknownError";
  readonly code = "outcome-unknown";
  readonly status = 503;
  constructor(
    readonly backend: StoreBackend,
    /** The key written (undefined for transaction(): the caller's statements name their own keys). */
    readonly key: string | undefined,
    readonly operation: string,
    options?: { cause?: unknown },
  ) {
    super(
      `${backend} ${operation}${key === undefined ? "" : ` of ${JSON.stringify(key)}`}: the answer was lost, the write may or may not have been applied; read it back`,
      options,
    );
  }
}

/**
 * The backend is reachable but not set up for this store, so no call can succeed until an operator
 * acts: `not-migrated` (PostgreSQL: the schema or its tables are missing, or older than this version
 * — run `migrate()`), `no-such-bucket` (S3), `conditional-writes-unsupported` (an S3 backend that
 * ignored If-None-Match or If-Match: fencing cannot be enforced on it; `verify()` diagnoses).
 * Nothing was written. HTTP: 503, `/problems/backend-misconfigured`.
 */
export class StoreSetupError extends Error {
  override readonly name = "StoreSetupError";
  readonly code = "store-setup";
  readonly status = 503;
  constructor(
    readonly backend: StoreBackend,
    readonly problem: "not-migrated" | "no-such-bucket" | "conditional-writes-unsupported",
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * The store's state is not as the store left it, in one of two ways. Either state it wrote (a
 * manifest, a fence object, a record or fence row) is not in a form it writes: truncated, edited by
 * hand, or written by an incompatible version; the store refuses to judge a fence against it, so
 * nothing was written. Or (S3, `what: "body"`, from get(), getBytes() and update()) a
 * manifest names a data object that is missing — found missing twice under the same manifest
 * version, so deleted while the manifest named it; update() writes nothing. put() and delete() read
 * no body: they succeed, and replace that manifest, which heals the key. HTTP: 502,
 * `/problems/corrupt-state`.
 */
export class CorruptStateError extends Error {
  override readonly name = "CorruptStateError";
  readonly code = "corrupt-state";
  readonly status = 502;
  constructor(
    readonly backend: StoreBackend,
    /** body: the data object a manifest names is missing (S3); the others: that state is not in a form the store writes. */
    readonly what: "manifest" | "fence" | "record" | "body",
    /** The key (manifest, record) or resource (fence) whose state is corrupt. */
    readonly subject: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
