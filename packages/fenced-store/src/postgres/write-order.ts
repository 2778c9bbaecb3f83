import { ownParams } from "./own-sql.js";

/**
 * What lets an unconditional put send its commit with its statement (`putOrdered`, commit-at.ts):
 * the newest version this store has been given back by the database, for any key — every version
 * comes from the schema's one sequence. A put carries it as `after`, and the statement refuses to
 * land on a record at exactly its fence (token and holder) whose version is newer (sql.ts,
 * recordUpsert). The invariant it serves: *a put the store gave up on never overwrites a later
 * acknowledged write of the same holder.*
 *
 * Why it holds: `after` was drawn from the sequence before the put was issued. Every write of the key
 * that commits after the put was issued draws its version later, under the record's row lock, so a
 * larger one (the sequence hands out increasing values; PROTOCOL.md, "What the database must
 * provide"). So a late put lands only on a key nobody wrote since it was issued; once the holder's
 * later write has landed, the record is at a newer version (at the same fence) or at a higher fence
 * (the ratchet refuses), and the late put writes nothing. A value that is too low only makes a put
 * refused that could have landed — the key written at this fence by another store or process since
 * this store last heard from the database, or two of its puts of one key at once: the store then sends
 * it as `putShared`, committed after its answer (no late commit possible).
 */
export class WriteOrder {
  private newest = 0n;

  /** The version a put issued now comes after. */
  after(): string {
    return this.newest.toString();
  }

  /** The database gave this store `version` (a write's, or a read's): it was drawn before anything issued from now on. */
  saw(version: string): void {
    const v = BigInt(version);
    if (v > this.newest) this.newest = v;
  }
}

/** The statements an unconditional put may send (sql.ts, own-sql.ts), its first one first. */
export type PutStatement = "putOwn" | "putOrderedShared" | "putOrdered" | "putShared";

/** What a put's statement answered: a row (it wrote), no row, a refusal as out of order (VERSION_REFUSED), or any other error. */
export type PutAnswer = "row" | "no-row" | "out-of-order" | "error";

/**
 * The first statement of every unconditional put: the one-row statement when the key is its fence's
 * resource (own-sql.ts), else the one at the fence the row already holds, under the shared fence
 * lock (fence-lock.ts).
 */
export function firstPut(key: string, resource: string): PutStatement {
  return key === resource ? "putOwn" : "putOrderedShared";
}

/**
 * What an unconditional put does after `sent` answered `answer`: the next statement to send, or how
 * it ends — `written` (the row is the result), `stale` (StaleTokenError) or `throw` (the error, as
 * it came). The decision of FencedPostgres.put, which sends what this says (store.ts). At most four
 * statements (PROTOCOL.md, "Faults"):
 * - `putOwn` wrote nothing: its record does not carry exactly this fence in its copy (own-sql.ts),
 *   which decides nothing; `putOrderedShared` decides as if it had not been sent.
 * - `putOrderedShared` wrote nothing: the row holds another fence, or none; the exclusive `putOrdered`
 *   raises it or finds the fence stale (fence-lock.ts, invariant 2: a new transaction, never an upgrade).
 * - out of order, from either ordered statement: the key was written at this very fence after the
 *   newest version this store heard of; `putShared`, committed only after its answer (commit-at.ts),
 *   cannot land late. Only once: a refusal as out of order came from a record at exactly this fence,
 *   so the fence row held it; rows only go up, so `putShared` writes or finds the fence stale.
 * - every other answer ends the put.
 */
export function nextPut(sent: PutStatement, answer: PutAnswer): PutStatement | "written" | "stale" | "throw" {
  if (answer === "row") return "written";
  if (answer === "out-of-order" && sent !== "putShared" && sent !== "putOwn") return "putShared";
  if (answer !== "no-row") return "throw";
  if (sent === "putOwn") return "putOrderedShared";
  return sent === "putOrderedShared" ? "putOrdered" : "stale";
}

/**
 * The parameters of `statement`, from the put's own ($1–$3 fence, $4 key, $5 value): the ordered ones
 * carry `after`, the version the put comes after (WriteOrder); `putShared` leaves it out; `putOwn`
 * leaves out the key, its resource (own-sql.ts, ownParams).
 */
export function putValues<T>(statement: PutStatement, values: readonly T[], after: T): T[] {
  if (statement === "putShared") return [...values];
  return statement === "putOwn" ? [...ownParams(values), after] : [...values, after];
}
