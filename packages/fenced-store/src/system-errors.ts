/**
 * What a failed request's system error code (Node's `code`: ECONNREFUSED, ECONNRESET, …) proves
 * about it, whatever the client library that surfaced it (AWS's SDK, Azure's: both keep the code on
 * the error they throw). Never read from message text.
 */

/** The system error code of a failed connection, if the error carries one. */
export function errnoOf(err: unknown): string | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const { code } = err as { code?: unknown };
  return typeof code === "string" ? code : undefined;
}

/**
 * Failures that prove the request never left this process: no connection could be opened (refused,
 * or the name did not resolve). A reset or a broken pipe proves nothing: the request may have been
 * written before.
 */
export const NEVER_SENT: ReadonlySet<string> = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN"]);

export function neverSent(err: unknown): boolean {
  const code = errnoOf(err);
  return code !== undefined && NEVER_SENT.has(code);
}

/** The connection failed or closed with the request possibly on it. */
export const CONNECTION_LOST: ReadonlySet<string> = new Set([
  "ECONNRESET",
  "EPIPE",
  "ECONNABORTED",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENETDOWN",
  "EHOSTDOWN",
]);

/** A socket-level timeout of the client's own. */
export const TIMED_OUT_ERRNO: ReadonlySet<string> = new Set(["ETIMEDOUT", "ESOCKETTIMEDOUT"]);
