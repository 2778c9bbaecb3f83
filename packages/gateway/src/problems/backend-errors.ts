import { sqlState } from "@fenced/store/internal";
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
    readonly backend: "postgres" | "s3",
    /** The store call that failed: "put", "get", "register", "migrate", "verify" … */
    readonly operation: string,
    /** What the backend answered, for an operator: PostgreSQL's SQLSTATE, S3's error code or HTTP status, or the client error's name. */
    readonly code: string,
    options: { cause: unknown },
  ) {
    super(`the ${backend} backend failed the ${operation} (${code})`, options);
  }
}

/** The backend behind each route family that calls a store. */
const BACKEND_OF: Readonly<Record<string, "postgres" | "s3">> = { records: "postgres", objects: "s3" };

/** The name of the AWS SDK's error when its credentials provider (chain) could not produce credentials. */
const CREDENTIALS_PROVIDER_ERROR = "CredentialsProviderError";

/**
 * A failure of the AWS SDK's client: every error that went through its middleware carries `$metadata`
 * (service exceptions, an answer it could not parse, a TLS or socket error the store did not type),
 * and a credentials provider that failed throws CredentialsProviderError before any request is sent.
 * The code: S3's error code, else the HTTP status, else the error's name or system code.
 */
function s3Code(outer: unknown): string | undefined {
  if (typeof outer !== "object" || outer === null) return undefined;
  // The store's conditional-write wrappers carry the SDK's error as `original` (as its s3/failures.ts reads them).
  const original = (outer as { original?: unknown }).original;
  const err = typeof original === "object" && original !== null ? original : outer;
  const { name, Code, code, $metadata } = err as { name?: unknown; Code?: unknown; code?: unknown; $metadata?: unknown };
  if (name === CREDENTIALS_PROVIDER_ERROR) return CREDENTIALS_PROVIDER_ERROR;
  if (typeof $metadata !== "object" || $metadata === null) return undefined;
  if (typeof Code === "string") return Code;
  const status = ($metadata as { httpStatusCode?: unknown }).httpStatusCode;
  if (typeof code === "string") return code;
  if (typeof status === "number") return `HTTP ${status}`;
  return typeof name === "string" ? name : "unknown";
}

/**
 * The call's failure as the backend's (BackendFailedError), if it is its own error answer or its
 * client's failure (see above); undefined for anything else (the stores' typed errors, a failure of
 * the gateway, a call into the lock).
 */
export function backendFailure(store: string, operation: string, err: unknown): BackendFailedError | undefined {
  const backend = BACKEND_OF[store];
  const code = backend === "postgres" ? sqlState(err) : backend === "s3" ? s3Code(err) : undefined;
  return backend === undefined || code === undefined ? undefined : new BackendFailedError(backend, operation, code, { cause: err });
}
