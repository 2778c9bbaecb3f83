/**
 * The short queue of requests waiting for a slot: by priority (higher first), then round-robin across
 * API keys, each key's own entries in arrival order. So while several keys wait, each gets its turn
 * whatever one of them sends; and when the queue is full, room is made by the key with the most
 * entries at the lowest priority, never by a key that waits less.
 */
export class FairQueue<T> {
  /** Per priority (index), per key, in arrival order; a Map iterates its keys in insertion order, the turn order. */
  readonly #levels: Map<string, T[]>[];
  #size = 0;

  constructor(priorities: number) {
    this.#levels = Array.from({ length: priorities }, () => new Map<string, T[]>());
  }

  get size(): number {
    return this.#size;
  }

  /** The entries `key` has waiting, at every priority. */
  sizeOf(key: string): number {
    let n = 0;
    for (const level of this.#levels) n += level.get(key)?.length ?? 0;
    return n;
  }

  push(priority: number, key: string, item: T): void {
    const level = this.#level(priority);
    const entries = level.get(key);
    if (entries === undefined) level.set(key, [item]);
    else entries.push(item);
    this.#size++;
  }

  /**
   * The next to serve: the highest priority's key whose turn it is, which then goes to the back of the
   * turn — with `accept`, the first key in turn whose next entry it accepts, each key passed over
   * keeping its place.
   */
  shift(accept?: (item: T) => boolean): T | undefined {
    for (let p = this.#levels.length - 1; p >= 0; p--) {
      const level = this.#level(p);
      for (const [key, entries] of level) {
        if (accept !== undefined && !accept(entries[0] as T)) continue;
        const item = entries.shift() as T;
        level.delete(key);
        if (entries.length > 0) level.set(key, entries);
        this.#size--;
        return item;
      }
    }
    return undefined;
  }

  /**
   * The queue is full and `key` wants a place at `priority`: the entry that gives up its place (taken
   * out of the queue), or undefined when the newcomer is the one to refuse. The victim is the newest
   * entry of the key with the most entries at the lowest priority present; it loses its place to a
   * newcomer of a higher priority, or of the same priority from a key with fewer entries (less one,
   * so that two keys do not trade places forever).
   */
  evictFor(priority: number, key: string): T | undefined {
    for (let p = 0; p <= priority; p++) {
      const level = this.#level(p);
      if (level.size === 0) continue;
      let longest: [string, T[]] | undefined;
      for (const entry of level) if (longest === undefined || entry[1].length > longest[1].length) longest = entry;
      const [victim, entries] = longest as [string, T[]];
      if (p === priority && entries.length <= (level.get(key)?.length ?? 0) + 1) return undefined;
      const item = entries.pop() as T;
      if (entries.length === 0) level.delete(victim);
      this.#size--;
      return item;
    }
    return undefined;
  }

  /** Takes out an entry that stopped waiting (its timeout, or its client left); false if it was not queued. */
  remove(priority: number, key: string, item: T): boolean {
    const level = this.#level(priority);
    const entries = level.get(key);
    const at = entries?.indexOf(item) ?? -1;
    if (entries === undefined || at === -1) return false;
    entries.splice(at, 1);
    if (entries.length === 0) level.delete(key);
    this.#size--;
    return true;
  }

  #level(priority: number): Map<string, T[]> {
    return this.#levels[priority] as Map<string, T[]>;
  }
}
