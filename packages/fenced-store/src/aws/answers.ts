import type { UnavailableReason } from "../errors.js";
import { DeadlineExceeded } from "../deadline.js";

/**
 * What a failed request of an AWS SDK v3 client says, read from the error's type, its service code,
 * its HTTP status or its system error code — never from message text. Shared by the stores on AWS's
 * SDK (S3, DynamoDB); what a failure means to each store is decided in its own failures.ts.
 */

/** 412/409 are not modelled exception classes in the SDK: the HTTP status is the reliable signal. */
export function statusOf(err: unknown): number | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  return (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
}

/** The service's error code (the SDK puts it in `Code`, or in `name` for codes it does not model). */
export function codeOf(err: unknown): string | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const { Code, name } = err as { Code?: unknown; name?: unknown };
  return typeof Code === "string" ? Code : typeof name === "string" ? name : undefined;
}

/** The system error code of a failed connection (ECONNREFUSED, ECONNRESET, …). */
function errnoOf(err: unknown): string | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const { code } = err as { code?: unknown };
  return typeof code === "string" ? code : undefined;
}

/**
 * Failures that prove the request never left this process: no connection could be opened (refused,
 * or the name did not resolve). A reset or a broken pipe proves nothing: the request may have been
 * written before.
 */
const NEVER_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN"]);

export function neverSent(err: unknown): boolean {
  const code = errnoOf(err);
  return code !== undefined && NEVER_SENT.has(code);
}

/** The connection failed or closed with the request possibly on it. */
const CONNECTION_LOST = new Set(["ECONNRESET", "EPIPE", "ECONNABORTED", "EHOSTUNREACH", "ENETUNREACH", "ENETDOWN", "EHOSTDOWN"]);
/** A timeout of the client's own request handler (connectionTimeout, requestTimeout, socket idle). */
const TIMED_OUT = new Set(["ETIMEDOUT", "ESOCKETTIMEDOUT", "TimeoutError", "RequestTimeout", "RequestTimeoutException"]);

/** Codes the SDK retries as throttling: the server refused to work now, and did nothing. */
const THROTTLED = new Set([
  "Throttling",
  "ThrottlingException",
  "ThrottledException",
  "RequestThrottledException",
  "TooManyRequestsException",
  "ProvisionedThroughputExceededException",
  "TransactionInProgressException",
  "RequestLimitExceeded",
  "BandwidthLimitExceeded",
  "LimitExceededException",
  "RequestThrottled",
  "SlowDown",
  "PriorRequestNotComplete",
  "EC2ThrottledException",
]);

/** What the SDK retries although the server answered below 500: refusals that did not apply the write. */
const RETRIED_REFUSALS = new Set([
  ...THROTTLED,
  "TimeoutError",
  "RequestTimeout",
  "RequestTimeoutException",
  "AuthFailure",
  "InvalidSignatureException",
  "RequestExpired",
  "RequestInTheFuture",
  "RequestTimeTooSkewed",
  "SignatureDoesNotMatch",
]);

/** Whether the SDK would retry this answer below 500 (its status or code says throttled or transient). */
export function retriedRefusal(err: unknown): boolean {
  if (statusOf(err) === 429) return true;
  const code = codeOf(err);
  return code !== undefined && RETRIED_REFUSALS.has(code);
}

/** Why the backend could not serve a request, if the error says so; undefined for any other failure. */
export function unavailableReason(err: unknown): UnavailableReason | undefined {
  if (err instanceof DeadlineExceeded || (err as { cause?: unknown } | null)?.cause instanceof DeadlineExceeded) return "timeout";
  const errno = errnoOf(err);
  if (errno !== undefined && NEVER_SENT.has(errno)) return "refused";
  if (errno !== undefined && CONNECTION_LOST.has(errno)) return "connection";
  const status = statusOf(err);
  const code = codeOf(err);
  if ((errno !== undefined && TIMED_OUT.has(errno)) || (code !== undefined && TIMED_OUT.has(code)) || status === 504) return "timeout";
  if (status === 429 || status === 503 || (code !== undefined && THROTTLED.has(code))) return "throttled";
  if (status !== undefined && status >= 500) return "connection";
  return undefined;
}
