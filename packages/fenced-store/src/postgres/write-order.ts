import type { CheckedFence } from "@fenced/fence";

/**
 * What lets an unconditional put send its commit with its statement (`putOrdered`, commit-at.ts):
 * for each key, the newest version this store saw one of its writes give the key, with the fence
 * that wrote it. A put carries it as `after` ("0" when the store saw none at this fence), and the
 * statement refuses to land on a record at exactly its fence whose version is newer (sql.ts,
 * recordUpsert). The invariant it serves: *a put the store gave up on never overwrites a later
 * acknowledged write of the same holder.*
 *
 * Why it holds, whatever this table holds: `after` is a version some write was given before the put
 * was issued. A later write of the key is issued after the put was, and draws its version from the
 * sequence only then, under the record's row lock — a larger one (the sequence hands out increasing
 * values; PROTOCOL.md, "What the database must provide") — and every write of the key that commits
 * after it draws a larger one still (sql.ts, recordUpsert). So once a later write of the same fence
 * has landed, the late put finds a version newer than its `after` and is refused. A stale or missing entry (evicted, another
 * store or process wrote the key, two puts of the key at once) only makes a put refused that need not
 * have been: the store then sends it as `putUnconditional`, committed after its answer (no late
 * commit possible), and records what that wrote.
 */
export class WriteOrder {
  private readonly seen = new Map<string, { readonly token: bigint; readonly holder: string | null; readonly version: string }>();

  /** `capacity`: keys remembered; the least recently written is forgotten first. */
  constructor(private readonly capacity = 10_000) {}

  /** The version a put of `key` under `fence` comes after: the newest this store saw written at that fence, or "0". */
  after(key: string, fence: CheckedFence): string {
    const entry = this.seen.get(key);
    return entry !== undefined && entry.token === fence.token && entry.holder === fence.holder ? entry.version : "0";
  }

  /** A write of this store gave `key` `version` under `fence` (acknowledged by the server). */
  wrote(key: string, fence: CheckedFence, version: string): void {
    const entry = this.seen.get(key);
    // Two puts of one key at once may be acknowledged out of order: keep the newer version of the fence.
    if (entry !== undefined && entry.token === fence.token && entry.holder === fence.holder && BigInt(entry.version) > BigInt(version))
      return;
    this.seen.delete(key);
    this.seen.set(key, { token: fence.token, holder: fence.holder, version });
    if (this.seen.size > this.capacity) {
      const oldest = this.seen.keys().next();
      if (oldest.done !== true) this.seen.delete(oldest.value);
    }
  }
}
