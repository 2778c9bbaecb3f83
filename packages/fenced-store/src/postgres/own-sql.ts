/**
 * The one-row path (PROTOCOL.md, "The one-row path"): a write whose key is its fence's resource, at
 * the fence that resource already holds, decided on the record's row alone — one UPDATE, one row
 * lock, no advisory lock, no fence row touched. Each statement takes the parameters of the write it
 * stands in front of (sql.ts) without the key, which is the fence's resource: $1–$3 the fence (the
 * key is $1), then that write's own (ownParams).
 *
 * The one check, read on the newest committed version of the record under its row lock:
 *
 *   the record of key $1 carries exactly this fence in its copy (fence_token = $2, fence_holder IS
 *   NOT DISTINCT FROM $3).
 *
 * Why that admits exactly what the ratchet would: the copy triggers (schema-sql.ts, COPY_TRIGGERS)
 * keep a committed copy of record R either null or equal to R's committed fence row, and admits()
 * passes a fence equal to the fence row. A raise of R updates record R in its own transaction, after
 * the fence row: so either the raise committed first, and the write meets the new copy and writes
 * nothing, or the write holds the record's row lock first, and commits before the raise can (which
 * orders the write before the raise, as a write holding the fence row FOR SHARE would be). A missing
 * copy (null: a record written by code that predates the copy, or moved to R by transfer) never
 * admits. A copy is never set on a record whose key is not its owner's name, and leaves with its
 * owner (COPY_TRIGGERS): so a copy found on record $1 is resource $1's fence row.
 *
 * Zero rows: nothing written, nothing locked after the statement ends. The store then sends the write
 * this stands in front of, which decides as it always did (a stale fence, another owner, a version
 * mismatch, a raise, a missing copy). So a one-row statement never refuses anything itself.
 *
 * Why an UPDATE is enough: it finds the row in its snapshot, waits for a writer holding it, and, when
 * that writer changed the row, evaluates the WHERE (and draws the version in SET) again on the newest
 * committed version (READ COMMITTED's EvalPlanQual). A row its snapshot does not show (a key created
 * since) is not found: zero rows, and the fallback writes it. Its commit goes with it (commit-at.ts):
 * the unconditional ones carry putOrdered's `after` check, the conditional ones land only at the
 * version read.
 */
import type { ObjectNames } from "./schema-sql.js";

export interface OwnWrites {
  /** $1–$3 fence (the key is $1), $4 value (JSON text), $5 after → { version } | no row. */
  readonly putOwn: string;
  /** $1–$3 fence, $4 value, $5 expected version → { version } | no row. */
  readonly putOwnIfVersion: string;
  /** $1–$3 fence, $4 after → { version } (the tombstone's) | no row. */
  readonly deleteOwn: string;
  /** $1–$3 fence, $4 expected version → { version } (the tombstone's) | no row. */
  readonly deleteOwnIfVersion: string;
}

/** The parameters of a one-row statement: those of the write it stands in front of ($1–$3 fence, $4 key, …), the key left out. */
export function ownParams<T>(values: readonly T[]): T[] {
  return [...values.slice(0, 3), ...values.slice(4)];
}

export function ownWrites({ records, versions }: ObjectNames): OwnWrites {
  // The check above: the row of key $1, its copy exactly this fence.
  const own = "r.key = $1 AND r.fence_token = $2::bigint AND r.fence_holder IS NOT DISTINCT FROM $3::text";
  // putOrdered's write order (write-order.ts): a record at exactly this fence with a newer version than
  // the one this write comes after may have been written after this write was issued.
  const ordered = (after: string): string =>
    `NOT (r.token = $2::bigint AND r.holder IS NOT DISTINCT FROM $3::text AND r.version > ${after}::bigint)`;
  // ifVersion: a live record at exactly the version read.
  const atVersion = (expected: string): string => `r.version = ${expected}::bigint AND r.value IS NOT NULL`;
  const update = (value: string, condition: string): string => `UPDATE ${records} AS r
SET value = ${value}, version = nextval('${versions}'), token = $2::bigint, holder = $3::text
WHERE ${own}
  AND ${condition}
RETURNING r.version`;
  return {
    putOwn: update("$4::jsonb", ordered("$5")),
    putOwnIfVersion: update("$4::jsonb", atVersion("$5")),
    deleteOwn: update("NULL", ordered("$4")),
    deleteOwnIfVersion: update("NULL", atVersion("$4")),
  };
}
