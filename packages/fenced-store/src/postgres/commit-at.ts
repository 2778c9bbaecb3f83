import type { NamedStatement } from "./sql.js";

/**
 * When a single-statement write's commit — the `Sync` after it, which ends its implicit transaction —
 * leaves this process (Session.write; PROTOCOL.md, "Faults"). The one rule it serves: *a write the
 * store gave up on never overwrites a later acknowledged write of the same holder.* A statement may
 * run after its call gave up (it waited for a lock, sat in a paused server's socket, was delayed on
 * the network), while the holder, told the write failed or may have, writes on.
 * - `with-statement`: the `Sync` goes in the same socket write as the statement: one round trip, the
 *   fence row locked only while the server runs and commits it. Its late commit is harmless, so once
 *   it is sent a lost answer is OutcomeUnknownError. `putIfVersion`, `deleteIfVersion` and `putOrdered` land only on
 *   the record exactly at the version read, and every committed write of a key gives it a version
 *   never used before (one sequence): a later write of the key leaves the late one refused
 *   (VERSION_REFUSED). `ratchet` (a register) writes no record: late, it raises the fence row to a
 *   token and holder the holder writes at anyway, or is refused by a higher one.
 *   `putOrdered` carries a version of the key its store saw written at its fence before it was issued
 *   (write-order.ts): a later write of the key draws a newer one, and so does every write that commits
 *   after it (drawn under the row lock), so a later write of the same holder leaves the late one
 *   refused as well (VERSION_REFUSED).
 * - `after-answer`: the `Sync` is sent only once the statement's answer arrived (pg's `rows`). Nothing
 *   in `putUnconditional` refuses a late commit over the same holder's later write (same token, same
 *   holder: the ratchet admits it), so a statement that runs after the call gave up must find its
 *   connection closed, which rolls it back; a failure before the answer is StoreUnavailableError.
 *   The store sends it only when `putOrdered` was refused as out of order: its write-order knowledge
 *   was stale (another store or process wrote the key at the fence, or two of its own puts of the key
 *   ran at once).
 *   Such a statement returns a row if and only if it wrote something (Session.write reads a lost
 *   Sync's answer after no row as "nothing applied").
 */
export const COMMIT_AT = {
  ratchet: "with-statement",
  putIfVersion: "with-statement",
  deleteIfVersion: "with-statement",
  putUnconditional: "after-answer",
  putOrdered: "with-statement",
  // The same writes at the fence the row holds (fence-lock.ts): the same reasons.
  putIfVersionShared: "with-statement",
  deleteIfVersionShared: "with-statement",
  putShared: "after-answer",
  putOrderedShared: "with-statement",
} as const satisfies Partial<Record<NamedStatement, CommitAt>>;
export type CommitAt = "with-statement" | "after-answer";
export type SingleStatementWrite = keyof typeof COMMIT_AT;
