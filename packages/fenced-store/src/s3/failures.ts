import { InvalidArgumentError } from "@fenced/fence";
import {
  ContentionError,
  OutcomeUnknownError,
  ResourceMismatchError,
  StaleTokenError,
  StoreSetupError,
  StoreUnavailableError,
  VersionMismatchError,
  type UnavailableReason,
} from "../errors.js";
import { Deadline, DeadlineExceeded } from "../deadline.js";

/**
 * What a failed request means, read from the error's type, its S3 code, its HTTP status or its
 * system error code — never from message text. Everything the store decides about a failure is
 * decided here: how a conditional PUT's failure is understood (conditional.ts), and which typed
 * error a call that failed throws (typedFailure).
 */

/** 412/409 are not modelled exception classes in the SDK: the HTTP status is the reliable signal. */
export function statusOf(err: unknown): number | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  return (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
}

/** The S3 error code (the SDK puts it in `Code`, or in `name` for codes it does not model). */
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

/** A 404 that says the key is absent (not that the bucket is). */
export function isAbsent(err: unknown): boolean {
  return statusOf(err) === 404 && codeOf(err) !== "NoSuchBucket";
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
function unavailableReason(err: unknown): UnavailableReason | undefined {
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

/** Answers that settle a call when nothing it sent may have been applied: the store's refusals and verdicts, and a caller's bad argument. */
function isVerdict(err: unknown): boolean {
  return (
    err instanceof StaleTokenError ||
    err instanceof VersionMismatchError ||
    err instanceof ResourceMismatchError ||
    err instanceof ContentionError ||
    err instanceof InvalidArgumentError
  );
}

export interface CallContext {
  /** What the call was: "get", "put", "delete", "update", "transfer", "register", "verify". */
  readonly operation: string;
  /** The key it was for (undefined: register, verify). */
  readonly key: string | undefined;
  readonly bucket: string;
  readonly deadline: Deadline | undefined;
  /**
   * Whether something this call sent may have been applied without its answer being known: a
   * manifest PUT (a fence PUT for register) that got no answer, or is still in flight — even if what
   * was read since shows another write (it may have landed and been replaced).
   */
  readonly open: boolean;
}

/**
 * Runs one call's work within one deadline (timeoutMs, merged with the caller's signal), and throws
 * what goes wrong as typedFailure makes it. `sent.open` is read at the failure: a write passes the
 * record its sends keep up to date.
 */
export async function withinDeadline<T>(
  timeoutMs: number,
  signal: AbortSignal | undefined,
  call: Omit<CallContext, "deadline" | "open">,
  work: (deadline: Deadline) => Promise<T>,
  sent: { readonly open: boolean } = { open: false },
): Promise<T> {
  const deadline = new Deadline(timeoutMs, signal);
  try {
    return await deadline.race(work(deadline));
  } catch (err) {
    throw typedFailure(err, { ...call, deadline, open: sent.open });
  } finally {
    deadline.end();
  }
}

/**
 * The error a failed call throws, from what went wrong. The caller's own abort throws its reason.
 *
 * INVARIANT: a refusal (StaleTokenError, VersionMismatchError, ResourceMismatchError), a give-up
 * (ContentionError) or StoreUnavailableError promises that nothing of the call was applied. While
 * something it sent may have been (`open`), no error makes that promise: whatever went wrong, even a
 * refusal by what is current now, the call throws OutcomeUnknownError, with what went wrong as its
 * cause. Only then do refusals and verdicts stand, and a timeout, a refused or lost connection, or
 * throttling is StoreUnavailableError, a missing bucket StoreSetupError; any other error is thrown as it is.
 */
export function typedFailure(err: unknown, call: CallContext): unknown {
  const { deadline } = call;
  if (deadline?.callerAborted === true) return deadline.caller?.reason ?? err;
  if (err instanceof OutcomeUnknownError) return err;
  // The commit point may have been passed: only reading back could tell, and it could not.
  if (call.open) return new OutcomeUnknownError("s3", call.key, call.operation, { cause: err });
  if (isVerdict(err)) return err;
  const timedOut = deadline?.timedOut === true || err instanceof DeadlineExceeded;
  if (timedOut) return new StoreUnavailableError("s3", "timeout", call.operation, { cause: err });
  if (err instanceof StoreUnavailableError || err instanceof StoreSetupError) return err;
  if (codeOf(err) === "NoSuchBucket") {
    return new StoreSetupError("s3", "no-such-bucket", `S3 bucket ${JSON.stringify(call.bucket)} does not exist`, { cause: err });
  }
  const reason = unavailableReason(err);
  if (reason !== undefined) return new StoreUnavailableError("s3", reason, call.operation, { cause: err });
  return err;
}

/** A backend that refused our own current ETag in both spellings: it does not implement If-Match as the store needs. */
export function refusedOwnEtag(key: string): StoreSetupError {
  return new StoreSetupError(
    "s3",
    "conditional-writes-unsupported",
    `the S3 backend refused If-Match with ${key}'s current ETag in both quoted and unquoted form; run verify() to diagnose`,
  );
}
