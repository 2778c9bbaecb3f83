import { ResourceMismatchError, VersionMismatchError } from "../errors.js";
import { FENCE_REFUSED, FOREIGN_KEY_REFUSED, VERSION_REFUSED } from "./schema-sql.js";

// The store's own refusals that a statement raises as an error (schema-sql.ts): recognised by their
// SQLSTATE, their subject carried in DETAIL. Every other failure of a statement is failures.ts's.

/** The error fields a refusal raised by a statement carries. */
function sqlError(err: unknown): { code?: unknown; detail?: unknown } {
  return typeof err === "object" && err !== null ? err : {};
}

/** A write's refusal for a key owned by another resource, recognised by its SQLSTATE; the owner travels in DETAIL. */
export function foreignKeyRefusal(err: unknown, key: string, resource: string): ResourceMismatchError | undefined {
  const { code, detail } = sqlError(err);
  if (code !== FOREIGN_KEY_REFUSED || typeof detail !== "string" || detail === "") return undefined;
  return new ResourceMismatchError(key, resource, detail);
}

/** A conditional write's refusal for the version, recognised by its SQLSTATE; DETAIL is the live version, or '' when there is none. */
export function versionRefusal(err: unknown, key: string, expected: string): VersionMismatchError | undefined {
  const { code, detail } = sqlError(err);
  if (code !== VERSION_REFUSED || typeof detail !== "string") return undefined;
  return new VersionMismatchError(key, expected, detail === "" ? undefined : detail);
}

/**
 * putOrdered's refusal: the record is at the write's own fence with a newer version than the one the
 * write comes after (write-order.ts). Nothing was written; the store sends the write again unordered.
 */
export function outOfOrder(err: unknown): boolean {
  return sqlError(err).code === VERSION_REFUSED;
}

/**
 * putAllOrdered's refusals, of any kind: a stale fence, a key of another resource, a version that
 * does not hold or a record out of order. The statement says only that it refused, not for which
 * key; nothing was written, and the store runs the call again as a transaction, which names it.
 */
export function putAllRefused(err: unknown): boolean {
  const { code } = sqlError(err);
  return code === FENCE_REFUSED || code === FOREIGN_KEY_REFUSED || code === VERSION_REFUSED;
}
