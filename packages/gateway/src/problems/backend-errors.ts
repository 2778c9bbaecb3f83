import pg from "pg";

/**
 * A backend failed at the connection level: the request may succeed once it is back (HTTP 503).
 * Decided where the backend was called (metrics.time), from what the drivers throw, by type and
 * code only — never by message text.
 */
export class BackendUnavailableError extends Error {
  override readonly name = "BackendUnavailableError";
  constructor(
    readonly store: string,
    options: { cause: unknown },
  ) {
    super(`the ${store} backend could not be reached`, options);
  }
}

/**
 * A backend answered a call with an error that no store classifies (S3: AccessDenied,
 * InvalidAccessKeyId; PostgreSQL: permission denied): the backend refused, not the gateway. HTTP 502.
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
 * Whether `err`, thrown by a call to `store`, is the backend's own error answer: an AWS SDK service
 * exception (it carries the SDK's `$fault` and `$metadata`) or node-postgres's DatabaseError.
 */
export function backendOf(store: string, err: unknown): "postgres" | "s3" | undefined {
  const backend = BACKEND_OF[store];
  if (backend === "postgres" && err instanceof pg.DatabaseError) return backend;
  if (backend === "s3" && typeof err === "object" && err !== null && "$fault" in err && "$metadata" in err) return backend;
  return undefined;
}

// Socket-level failures from Node (any backend).
const SYSTEM_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ECONNABORTED",
]);
// SQLSTATEs that mean "the server cannot serve you now": class 08 (connection exception),
// 53300 too many connections, 57P01–57P03 shutdown / cannot connect now.
const PG_UNAVAILABLE = /^(08...|53300|57P0[123])$/;

/** Whether `err`, thrown by a call to `store`'s backend, means the backend is unreachable. */
export function isUnavailable(store: string, err: unknown): boolean {
  if (typeof err !== "object" || err === null) return false;
  const { code, $metadata, name } = err as { code?: unknown; $metadata?: { httpStatusCode?: unknown }; name?: unknown };
  if (typeof code === "string" && (SYSTEM_CODES.has(code) || (store === "records" && PG_UNAVAILABLE.test(code)))) return true;
  // The AWS SDK: a 5xx after its own retries, or its own timeout.
  if (
    store === "objects" &&
    (name === "TimeoutError" || (typeof $metadata?.httpStatusCode === "number" && $metadata.httpStatusCode >= 500))
  )
    return true;
  // node-postgres reports a dropped connection, a connect timeout and a pool it cannot fill as plain
  // `Error`s with no code (a DatabaseError always has a SQLSTATE). From a records call, that is the database.
  if (store === "records" && Object.getPrototypeOf(err) === Error.prototype && code === undefined) return true;
  // Redis clients (ioredis): connection-level failures carry the same Node system codes (above).
  return false;
}
