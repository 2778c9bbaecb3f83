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
