/**
 * A map of at most `capacity` entries that drops the least recently set first, approximately: a key
 * set again since it was last passed over gets a second chance. Setting a key it holds changes the
 * entry in place, never deleting and re-adding it: a Map that takes and drops an entry on every set
 * would, once a mark-compact had promoted its hash table, keep every value it ever held alive into
 * old space, through the chain V8 links from each hash table it replaces to the next. Entries move
 * only when a new key would go over capacity: the oldest goes, unless it was set again since, in
 * which case it goes to the back, unmarked, and the next oldest is asked.
 */
export class Lru<K, V> {
  private readonly map = new Map<K, { value: V; again: boolean }>();

  constructor(private readonly capacity: number) {}

  get(key: K): V | undefined {
    return this.map.get(key)?.value;
  }

  /** Sets the entry: a key held already keeps its place, marked as set again. */
  set(key: K, value: V): void {
    const held = this.map.get(key);
    if (held !== undefined) {
      held.value = value;
      held.again = true;
      return;
    }
    if (this.map.size >= this.capacity) this.dropOldest();
    this.map.set(key, { value, again: false });
  }

  delete(key: K): void {
    this.map.delete(key);
  }

  /** Drops the oldest entry not set again since it was last passed over (at most one round). */
  private dropOldest(): void {
    for (const [key, entry] of this.map) {
      this.map.delete(key);
      if (!entry.again) return;
      entry.again = false;
      this.map.set(key, entry);
    }
  }
}
