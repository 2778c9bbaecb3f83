import type { StoreName } from "../stores/registry.js";
import type { StoreRegistration } from "../stores/registration.js";
/**
 * What the stores pass on unchanged: both wrap every connection-level failure (refused, reset,
 * timed out, throttled) in their own typed errors (StoreUnavailableError, OutcomeUnknownError), and
 * the lock reports its nodes' failures in LockNotAcquiredError and LeaseLostError. What is left is
 * the backend's own error answer to a call — S3's AccessDenied or InvalidAccessKeyId, PostgreSQL's
 * permission denied or missing database — or a failure of the backend's client below the store
 * (S3 credentials the client could not obtain, a TLS handshake refused, an answer it could not
 * parse), which no store classifies: the backend or its configuration failed, not the gateway.
 * Decided where the backend was called (metrics.time), by type and shape only, never message text.
 */
export class BackendFailedError extends Error {
  override readonly name = "BackendFailedError";
  constructor(
    /** The store's name (stores/registry.ts). */
    readonly backend: StoreName,
    /** The store call that failed: "put", "get", "register", "migrate", "verify" … */
    readonly operation: string,
    /** What the backend answered, for an operator: PostgreSQL's SQLSTATE, S3's error code or HTTP status, or the client error's name. */
    readonly code: string,
    options: { cause: unknown },
  ) {
    super(`the ${backend} backend failed the ${operation} (${code})`, options);
  }
}

/**
 * The call's failure as the backend's (BackendFailedError), if it is its own error answer or its
 * client's failure (see above), told by the registration of the store called (`store`: undefined
 * for a call into the lock); undefined for anything else (the stores' typed errors, a failure of the
 * gateway, a call into the lock).
 */
export function backendFailure(store: StoreRegistration | undefined, operation: string, err: unknown): BackendFailedError | undefined {
  const code = store?.backendCode(err);
  // A registration's name is one of STORE_NAMES: the registry lists them.
  return store === undefined || code === undefined
    ? undefined
    : new BackendFailedError(store.name as StoreName, operation, code, { cause: err });
}
