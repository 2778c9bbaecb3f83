import { StoreSetupError } from "../errors.js";
import type { Deadline } from "../deadline.js";
import { codeOf, statusOf, unavailableReason } from "../aws/answers.js";
import {
  typedFailure as typedBy,
  withinDeadline as within,
  type BackendErrors,
  type BackendFailures,
  type CallContext as AnyCall,
} from "../cas/failures.js";

/**
 * What a failed S3 request means to this store, read from its S3 code, HTTP status or system error
 * code (../aws/answers.ts) — never from message text: how a conditional PUT's failure is understood
 * (conditional.ts), and, through the algorithm's rule (../cas/failures.ts), which typed error a call
 * that failed throws.
 */

/** A 404 that says the key is absent (not that the bucket is). */
export function isAbsent(err: unknown): boolean {
  return statusOf(err) === 404 && codeOf(err) !== "NoSuchBucket";
}

/** A call of this store, as errors name it: its bucket too. */
export interface CallContext extends AnyCall {
  readonly bucket: string;
}

/** S3's answers: unavailable as AWS's SDK says, a missing bucket a setup problem. */
function s3Errors(bucket: string): BackendErrors {
  return {
    backend: "s3",
    unavailable: unavailableReason,
    setup: (err) =>
      codeOf(err) === "NoSuchBucket"
        ? new StoreSetupError("s3", "no-such-bucket", `S3 bucket ${JSON.stringify(bucket)} does not exist`, { cause: err })
        : undefined,
  };
}

/** The error a failed call of the S3 store throws (../cas/failures.ts, typedFailure). */
export function typedFailure(err: unknown, call: CallContext): unknown {
  return typedBy(err, call, s3Errors(call.bucket));
}

/** The S3 store's failures, as the algorithm asks for them (../cas/io.ts). */
export function s3Failures(bucket: string): BackendFailures {
  return { backend: "s3", typed: (err, call) => typedFailure(err, { ...call, bucket }), refusedOwnEtag };
}

/** One call's work within one deadline (../cas/failures.ts, withinDeadline), its failure typed as S3's. */
export function withinDeadline<T>(
  timeoutMs: number,
  signal: AbortSignal | undefined,
  call: Omit<CallContext, "deadline" | "open">,
  work: (deadline: Deadline) => Promise<T>,
  sent: { readonly open: boolean } = { open: false },
): Promise<T> {
  return within(timeoutMs, signal, call, s3Failures(call.bucket), work, sent);
}

/** A backend that refused our own current ETag in both spellings: it does not implement If-Match as the store needs. */
function refusedOwnEtag(key: string): StoreSetupError {
  return new StoreSetupError(
    "s3",
    "conditional-writes-unsupported",
    `the S3 backend refused If-Match with ${key}'s current ETag in both quoted and unquoted form; run verify() to diagnose`,
  );
}
