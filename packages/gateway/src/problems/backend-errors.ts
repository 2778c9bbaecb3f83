import pg from "pg";

/**
 * What the stores pass on unchanged: both wrap every connection-level failure (refused, reset,
 * timed out, throttled) in their own typed errors (StoreUnavailableError, OutcomeUnknownError), and
 * the lock reports its nodes' failures in LockNotAcquiredError and LeaseLostError. What is left is
 * the backend's own error answer to a call — S3's AccessDenied or InvalidAccessKeyId, PostgreSQL's
 * permission denied or missing database — which no store classifies: the backend refused, not the
 * gateway. Decided where the backend was called (metrics.time), by type only.
 */
export class BackendFailedError extends Error {
  override readonly name = "BackendFailedError";
  constructor(
    readonly backend: "postgres" | "s3",
    options: { cause: unknown },
  ) {
    super(`the ${backend} backend answered with an error`, options);
  }
}

/** The backend behind each route family that calls a store. */
const BACKEND_OF: Readonly<Record<string, "postgres" | "s3">> = { records: "postgres", objects: "s3" };

/**
 * Which backend answered `err` to a call of `store`, if it is that backend's own error answer: an
 * AWS SDK service exception (it carries the SDK's `$fault` and `$metadata`) or node-postgres's
 * DatabaseError. undefined for anything else (the stores' typed errors, a failure of the gateway).
 */
export function backendOf(store: string, err: unknown): "postgres" | "s3" | undefined {
  const backend = BACKEND_OF[store];
  if (backend === "postgres" && err instanceof pg.DatabaseError) return backend;
  if (backend === "s3" && typeof err === "object" && err !== null && "$fault" in err && "$metadata" in err) return backend;
  return undefined;
}
