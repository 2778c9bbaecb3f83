import type { UnavailableReason } from "../errors.js";
import { DeadlineExceeded } from "../deadline.js";
import { CONNECTION_LOST, NEVER_SENT, errnoOf } from "../system-errors.js";

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

/** A timeout of the client's own request handler (connectionTimeout, requestTimeout, socket idle), as a system error code or the SDK's. */
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
