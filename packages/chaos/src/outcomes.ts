import {
  ContentionError,
  OutcomeUnknownError,
  ResourceMismatchError,
  StaleTokenError,
  StoreUnavailableError,
  VersionMismatchError,
} from "@fenced/store";
import { GatewayFailedError, GatewayRefusedError, LockBusyError } from "./gateway-client.js";
import type { FailReason } from "./history.js";
import { NoLeaseError } from "./lease-source.js";

/**
 * How a worker classifies the error that ended an operation, by type — never by message text:
 *
 * | error | before the write was sent | after |
 * |---|---|---|
 * | StaleTokenError, VersionMismatchError, ResourceMismatchError, a gateway's other 4xx | refused | refused |
 * | NoLeaseError (LockNotAcquired, no quorum, no lease by the deadline) | unavailable (lock) | — |
 * | StoreUnavailableError, ContentionError, 503 `/problems/unavailable` or `/problems/overloaded` | unavailable | unavailable |
 * | OutcomeUnknownError, 503 `/problems/outcome-unknown` | unavailable (the counter's write never left) | outcome unknown |
 * | a broken connection, a client-side timeout | unavailable | outcome unknown |
 * | StoreSetupError, CorruptStateError, a gateway's other 5xx, anything else | error | outcome unknown |
 *
 * A broken connection or a timeout surfaces untyped only where no store stands between the worker
 * and the backend: the raw clients of "unfenced", the worker's own HTTP client to a gateway. Its
 * label (the error's code) says so in the report.
 */

export type Classified = { readonly outcome: "fail"; readonly reason: FailReason } | { readonly outcome: "info" };

const UNAVAILABLE_PROBLEM = "/problems/unavailable";
const OUTCOME_UNKNOWN_PROBLEM = "/problems/outcome-unknown";
/** Refused by the gateway's admission control before any lock or store work: nothing was written, sent or not. */
const OVERLOADED_PROBLEM = "/problems/overloaded";

/** Node's and the clients' codes for a connection that broke, was refused, or gave no answer in time. */
const NETWORK_CODES = new Set(["ECONNRESET", "ECONNREFUSED", "EPIPE", "ETIMEDOUT", "ECONNABORTED", "EHOSTUNREACH", "ENETUNREACH"]);
/** Names of the errors an aborted or timed-out call rejects with (AbortSignal.timeout, the SDKs, pg). */
const ABORT_NAMES = new Set(["AbortError", "TimeoutError", "RequestTimeout"]);

function codeOf(err: unknown): string | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const code = (err as { code?: unknown }).code;
  return typeof code === "string" ? code : undefined;
}

/** A broken connection or a client-side timeout, from whichever client: nothing says whether a write it carried landed. */
function brokenConnection(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = codeOf(err);
  if (code !== undefined && NETWORK_CODES.has(code)) return true;
  if (ABORT_NAMES.has(err.name)) return true;
  // pg ends a query whose connection ended with a plain Error and no code; the S3 SDK a 5xx with $metadata.
  const status = (err as { $metadata?: { httpStatusCode?: unknown } }).$metadata?.httpStatusCode;
  if (typeof status === "number" && status >= 500) return true;
  // pg again: a query sent on a client whose connection broke while it was checked out (a transaction of several statements).
  return /^Connection terminated|^Query read timeout|^socket hang up|^timeout exceeded when trying to connect|^Client has encountered a connection error|^Client was closed/.test(
    err.message,
  );
}

/** A short label of the error's type for the report: its class, a gateway answer's status and problem, or its code. */
export function errorLabel(err: unknown): string {
  if (err instanceof GatewayFailedError || err instanceof GatewayRefusedError) return `${err.status} ${err.type ?? "(no problem type)"}`;
  if (!(err instanceof Error)) return typeof err;
  if (err instanceof StoreUnavailableError) return `StoreUnavailableError (${err.reason})`;
  const code = codeOf(err);
  if (code !== undefined && NETWORK_CODES.has(code)) return code;
  if (brokenConnection(err)) return `${err.name}: ${err.message.slice(0, 40)}`;
  return err.name;
}

/**
 * `sent`: the counter's write had left the worker when the error came. A typed store error is told
 * apart by class, or by name when it crossed a module boundary.
 */
export function classify(err: unknown, sent: boolean): Classified {
  const fail = (reason: FailReason): Classified => ({ outcome: "fail", reason });
  const is = <T>(cls: abstract new (...args: never[]) => T): boolean =>
    err instanceof cls || (err instanceof Error && err.name === cls.name);
  if (is(StaleTokenError)) return fail("stale");
  if (is(VersionMismatchError)) return fail("version");
  if (is(ResourceMismatchError) || is(GatewayRefusedError)) return fail("refused");
  if (is(NoLeaseError) || is(LockBusyError)) return fail("lock");
  if (is(StoreUnavailableError) || is(ContentionError)) return fail("unavailable");
  if (err instanceof GatewayFailedError) {
    if (err.status === 503 && (err.type === UNAVAILABLE_PROBLEM || err.type === OVERLOADED_PROBLEM)) return fail("unavailable");
    if (err.status === 503 && err.type === OUTCOME_UNKNOWN_PROBLEM) return sent ? { outcome: "info" } : fail("unavailable");
  }
  if (sent) return { outcome: "info" };
  if (is(OutcomeUnknownError) || brokenConnection(err)) return fail("unavailable");
  // StoreSetupError, CorruptStateError, a gateway's other 5xx, anything else: a finding, not a fault's effect.
  return fail("error");
}
