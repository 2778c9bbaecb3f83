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
 *   `putOrdered` carries a version drawn before it was issued (write-order.ts): every write of the key
 *   that commits after that draws a newer one (under the row lock), so a later write of the same
 *   holder leaves the late one refused as well (VERSION_REFUSED).
 * - `after-answer`: the `Sync` is sent only once the statement's answer arrived (pg's `rows`). Nothing
 *   in `putShared` refuses a late commit over the same holder's later write (same token, same
 *   holder: the ratchet admits it), so a statement that runs after the call gave up must find its
 *   connection closed, which rolls it back; a failure before the answer is StoreUnavailableError.
 *   The store sends it only when `putOrdered` was refused as out of order: the key was written at its
 *   fence after the newest version the store had heard of (by another store or process, or by one of
 *   its own puts of the key running at the same time).
 *   Such a statement returns a row if and only if it wrote something (Session.write reads a lost
 *   Sync's answer after no row as "nothing applied").
 */
export const COMMIT_AT = {
  ratchet: "with-statement",
  putIfVersion: "with-statement",
  deleteIfVersion: "with-statement",
  putOrdered: "with-statement",
  // putAll() in one statement: its conditional records as putIfVersion, its unconditional ones as
  // putOrdered, its raises as ratchet's; refused in any way, it writes nothing (sql.ts).
  putAllOrdered: "with-statement",
  // The same writes at the fence the row holds (fence-lock.ts): the same reasons.
  putIfVersionShared: "with-statement",
  deleteIfVersionShared: "with-statement",
  // After an out-of-order refusal, its `after` check left out: the commit after its answer keeps it from landing late.
  putShared: "after-answer",
  putOrderedShared: "with-statement",
  // The one-row path (own-sql.ts): the unconditional ones carry putOrdered's `after` check, the
  // conditional ones land only at the version read, as theirs do.
  putOwn: "with-statement",
  putOwnIfVersion: "with-statement",
  deleteOwn: "with-statement",
  deleteOwnIfVersion: "with-statement",
} as const satisfies Partial<Record<NamedStatement, CommitAt>>;
export type CommitAt = "with-statement" | "after-answer";
export type SingleStatementWrite = keyof typeof COMMIT_AT;
