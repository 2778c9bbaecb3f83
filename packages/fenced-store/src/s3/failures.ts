import { InvalidArgumentError } from "@fenced/fence";
import {
  ContentionError,
  OutcomeUnknownError,
  ResourceMismatchError,
  StaleTokenError,
  StoreSetupError,
  StoreUnavailableError,
  VersionMismatchError,
} from "../errors.js";
import { Deadline, DeadlineExceeded } from "../deadline.js";
import { codeOf, statusOf, unavailableReason } from "../aws/answers.js";

/**
 * What a failed request means, read from the error's type, its S3 code, its HTTP status or its
 * system error code (../aws/answers.ts) — never from message text. Everything the store decides
 * about a failure is decided here: how a conditional PUT's failure is understood (conditional.ts),
 * and which typed error a call that failed throws (typedFailure).
 */

/** A 404 that says the key is absent (not that the bucket is). */
export function isAbsent(err: unknown): boolean {
  return statusOf(err) === 404 && codeOf(err) !== "NoSuchBucket";
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
