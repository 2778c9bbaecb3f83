import { InvalidArgumentError } from "@fenced/fence";
import {
  ContentionError,
  OutcomeUnknownError,
  ResourceMismatchError,
  StaleTokenError,
  StoreSetupError,
  StoreUnavailableError,
  VersionMismatchError,
  type StoreBackend,
  type UnavailableReason,
} from "../errors.js";
import { Deadline, DeadlineExceeded } from "../deadline.js";

/**
 * Which typed error a failed call of a store of the algorithm throws (typedFailure), whatever its
 * backend; what a backend's answers say (unavailable, a missing bucket or table) is the backend's
 * own (BackendErrors: s3/failures.ts, dynamodb/failures.ts).
 */

/** What a failed call was, for the typed error it throws (the backend's failures.ts). */
export interface CallContext {
  /** What the call was: "get", "put", "delete", "update", "transfer", "register", "verify". */
  readonly operation: string;
  /** The key it was for (undefined: register, verify). */
  readonly key: string | undefined;
  readonly deadline: Deadline | undefined;
  /**
   * Whether something this call sent may have been applied without its answer being known: a
   * manifest write (a fence write for register) that got no answer, or is still in flight — even if
   * what was read since shows another write (it may have landed and been replaced).
   */
  readonly open: boolean;
}

/** What a backend's errors say, read by type, code or status (never by message). */
export interface BackendErrors {
  readonly backend: StoreBackend;
  /** Why the backend could not serve a request, if the error says so (refused, timeout, connection, throttled). */
  unavailable(err: unknown): UnavailableReason | undefined;
  /** The store's setup is missing (a bucket, a table), if the error says so. */
  setup(err: unknown): StoreSetupError | undefined;
}

/** How a backend's failures become the typed errors of the contract. */
export interface BackendFailures {
  /** Whose store it is, as errors name it ("s3", "dynamodb"). */
  readonly backend: StoreBackend;
  /** The error a failed call throws (typed by what went wrong, and OutcomeUnknownError while `call.open`). */
  typed(err: unknown, call: CallContext): unknown;
  /** The backend refused a record's current ETag in every spelling it knows: it does not implement the condition as the store needs. */
  refusedOwnEtag(key: string): Error;
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

/**
 * The error a failed call throws, from what went wrong. The caller's own abort throws its reason.
 *
 * INVARIANT: a refusal (StaleTokenError, VersionMismatchError, ResourceMismatchError), a give-up
 * (ContentionError) or StoreUnavailableError promises that nothing of the call was applied. While
 * something it sent may have been (`open`), no error makes that promise: whatever went wrong, even a
 * refusal by what is current now, the call throws OutcomeUnknownError, with what went wrong as its
 * cause. Only then do refusals and verdicts stand, and a timeout, a refused or lost connection, or
 * throttling is StoreUnavailableError, a missing bucket or table StoreSetupError; any other error is
 * thrown as it is.
 */
export function typedFailure(err: unknown, call: CallContext, errors: BackendErrors): unknown {
  const { deadline } = call;
  const { backend } = errors;
  if (deadline?.callerAborted === true) return deadline.caller?.reason ?? err;
  if (err instanceof OutcomeUnknownError) return err;
  // The commit point may have been passed: only reading back could tell, and it could not.
  if (call.open) return new OutcomeUnknownError(backend, call.key, call.operation, { cause: err });
  if (isVerdict(err)) return err;
  const timedOut = deadline?.timedOut === true || err instanceof DeadlineExceeded;
  if (timedOut) return new StoreUnavailableError(backend, "timeout", call.operation, { cause: err });
  if (err instanceof StoreUnavailableError || err instanceof StoreSetupError) return err;
  const setup = errors.setup(err);
  if (setup !== undefined) return setup;
  const reason = errors.unavailable(err);
  if (reason !== undefined) return new StoreUnavailableError(backend, reason, call.operation, { cause: err });
  return err;
}

/**
 * Runs one call's work within one deadline (timeoutMs, merged with the caller's signal), and throws
 * what goes wrong as `failures.typed` makes it. `sent.open` is read at the failure: a write passes
 * the record its sends keep up to date.
 */
export async function withinDeadline<T>(
  timeoutMs: number,
  signal: AbortSignal | undefined,
  call: Omit<CallContext, "deadline" | "open">,
  failures: BackendFailures,
  work: (deadline: Deadline) => Promise<T>,
  sent: { readonly open: boolean } = { open: false },
): Promise<T> {
  const deadline = new Deadline(timeoutMs, signal);
  try {
    return await deadline.race(work(deadline));
  } catch (err) {
    throw failures.typed(err, { ...call, deadline, open: sent.open });
  } finally {
    deadline.end();
  }
}
