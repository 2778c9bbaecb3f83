/**
 * A map that keeps its `capacity` most recently set entries: Map iteration order is insertion order,
 * so re-inserting on every set keeps the oldest first, and it is evicted once over capacity.
 */
export class Lru<K, V> {
  private readonly map = new Map<K, V>();

  constructor(private readonly capacity: number) {}

  get(key: K): V | undefined {
    return this.map.get(key);
  }

  /** Sets the entry and makes it the most recent. */
  set(key: K, value: V): void {
    this.map.delete(key); // re-insert: Map order is the LRU order
    this.map.set(key, value);
    if (this.map.size > this.capacity) {
      const oldest = this.map.keys().next();
      if (oldest.done !== true) this.map.delete(oldest.value);
    }
  }

  delete(key: K): void {
    this.map.delete(key);
  }
}
