/**
 * The answer to an error of the packages (FencedError): its kind is the one PROBLEM_OF_CODE names
 * for its code (kinds.ts); its detail and extension members are built from the error's fields, never
 * its message when the answer is a 5xx (a 5xx says what failed, not how a backend worded it).
 */
import { CredentialError, ExpiredCredentialError, SealError } from "@fenced/fence/credentials";
import { type FencedError, InvalidArgumentError } from "@fenced/fence";
import { LeaseLostError, LockNotAcquiredError, TokenSpaceExhaustedError } from "@fenced/lock";
import {
  ContentionError,
  CorruptStateError,
  OutcomeUnknownError,
  ResourceMismatchError,
  StaleTokenError,
  StoreSetupError,
  StoreUnavailableError,
  VersionMismatchError,
} from "@fenced/store";
import { PROBLEM_OF_CODE, type ProblemExtensions, type ProblemKind } from "./kinds.js";
import type { StoreName } from "../stores/registry.js";

/** A problem's kind, detail and extension members, before it becomes a body. */
export interface Answer {
  readonly kind: ProblemKind;
  readonly detail: string;
  readonly extensions: Readonly<Record<string, unknown>>;
}

/** One answer, its extensions typed by its kind. */
function answer<K extends ProblemKind>(kind: K, detail: string, extensions: ProblemExtensions<K>): Answer {
  return { kind, detail, extensions };
}

/** The answer to an error of the packages. */
export function fencedAnswer(err: FencedError): Answer {
  const kind = PROBLEM_OF_CODE[err.code];
  if (err instanceof InvalidArgumentError) {
    const path = requestPath(err.argument);
    // As a body schema's problem says it (problem.ts): the detail names the path, each error's message does not.
    return answer(PROBLEM_OF_CODE[err.code], `${path}: ${err.reason}`, { errors: [{ path, message: err.reason }] });
  }
  // Tokens are 64-bit: decimal strings, never JSON numbers (a double would round them).
  if (err instanceof StaleTokenError)
    return answer(PROBLEM_OF_CODE[err.code], err.message, {
      resource: err.resource,
      token: err.token.toString(),
      highest: err.highest.toString(),
    });
  if (err instanceof ResourceMismatchError)
    return answer(PROBLEM_OF_CODE[err.code], err.message, { key: err.key, resource: err.resource, owner: err.owner });
  if (err instanceof VersionMismatchError)
    return answer(PROBLEM_OF_CODE[err.code], err.message, { key: err.key, expected: err.expected, actual: err.actual ?? null });
  return storeAnswer(err) ?? lockAnswer(err) ?? credentialAnswer(err) ?? { kind, detail: err.message, extensions: {} };
}

/**
 * An argument's name as a path into the request, in the one spelling every problem of the gateway
 * uses (its body schemas' too, problem.ts): indexes as dotted segments, `writes.0.value` where a
 * package names it `writes[0].value`. A quoted part (a value's object key, `value key "a[1]"`) is
 * the key's own text and stays as it is.
 */
function requestPath(argument: string): string {
  const quoted = argument.indexOf('"');
  const path = quoted === -1 ? argument : argument.slice(0, quoted);
  return path.replace(/\[(\d+)\]/g, ".$1") + (quoted === -1 ? "" : argument.slice(quoted));
}

/** The stores' operations that write nothing whatever happens: their answers say nothing of writes. */
const READS = new Set(["get", "fence"]);

/** The store an error came from: a registered one, since the gateway calls no other. */
const served = (err: { readonly backend: string }): StoreName => err.backend as StoreName;

/**
 * The stores' failures: whether anything may have been written decides the kind (nothing:
 * `unavailable`; perhaps: `outcomeUnknown`), as the codes say.
 */
function storeAnswer(err: FencedError): Answer | undefined {
  if (err instanceof StoreUnavailableError)
    return answer(
      PROBLEM_OF_CODE[err.code],
      `${err.backend} could not serve the ${err.operation} (${err.reason}); ${READS.has(err.operation) ? "" : "nothing was written, "}retry later`,
      {},
    );
  if (err instanceof ContentionError)
    return answer(PROBLEM_OF_CODE[err.code], "the key kept changing under the store; nothing was written, retry later", {});
  if (err instanceof OutcomeUnknownError)
    return answer(
      PROBLEM_OF_CODE[err.code],
      `the ${err.backend} ${err.operation} was sent and its answer lost: it may have been applied (a conditional write may still land, on the version it expects): retry it, with the same If-Match for a conditional write`,
      { backend: served(err), ...(err.key === undefined ? {} : { key: err.key }) },
    );
  if (err instanceof StoreSetupError)
    return answer(PROBLEM_OF_CODE[err.code], `${err.backend}: ${err.problem}; an operator must act`, {
      backend: served(err),
      problem: err.problem,
    });
  if (err instanceof CorruptStateError)
    return answer(
      PROBLEM_OF_CODE[err.code],
      err.what === "body"
        ? `${err.backend}: the manifest of the key names a body that is missing (deleted while named); a write of the key replaces it; nothing was written`
        : `${err.backend} holds a ${err.what} the store did not write; nothing was written`,
      { backend: served(err), what: err.what, subject: err.subject },
    );
  return undefined;
}

/** The lock's errors, when no route answered them itself (the lease routes do: see routes/lease-grants.ts). */
function lockAnswer(err: FencedError): Answer | undefined {
  if (err instanceof TokenSpaceExhaustedError) return answer(PROBLEM_OF_CODE[err.code], err.message, { resource: err.resource });
  if (err instanceof LockNotAcquiredError)
    return answer(PROBLEM_OF_CODE[err.code], err.message, {
      resource: err.resource,
      ...(err.resources.length > 1 ? { resources: [...err.resources] } : {}),
    });
  if (err instanceof LeaseLostError)
    return answer(PROBLEM_OF_CODE[err.code], err.message, { resource: err.resource, token: err.token.toString(), kind: err.kind });
  return undefined;
}

/** A credential's or a lease id's refusal, when no route answered it itself (auth/credentials.ts, auth/lease-id.ts do). */
function credentialAnswer(err: FencedError): Answer | undefined {
  if (err instanceof ExpiredCredentialError) {
    const { fence, expiresAt } = err.credential;
    return answer(PROBLEM_OF_CODE[err.code], err.message, {
      resource: fence.resource,
      token: fence.token.toString(),
      expiredAt: expiresAt,
    });
  }
  if (err instanceof CredentialError && err.code === "CREDENTIAL_INVALID")
    return answer(PROBLEM_OF_CODE[err.code], err.message, { reason: err.problem === "unknown-key" ? "unknown-key" : "bad-signature" });
  if (err instanceof SealError && err.code === "SEAL_INVALID")
    return answer(PROBLEM_OF_CODE[err.code], err.message, { reason: err.problem === "unknown-key" ? "unknown-key" : "bad-signature" });
  // CREDENTIAL_MALFORMED, SEAL_MALFORMED: `invalid`, whose members are optional.
  return undefined;
}
