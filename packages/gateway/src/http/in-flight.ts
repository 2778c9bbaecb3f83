/**
 * What the gateway has in flight (serve()'s responses, a connection's pipelined responses, the lease
 * grants a drain waits for), held without a hash table. A `Set` or `Map` that takes one entry and drops another with every request is the wrong
 * container in a process that serves for months: V8 replaces a Set's hash table as its entries come
 * and go, and links each table it replaces to the one after it (for iterators still on the old one).
 * Once a mark-compact has moved the live table to old space, that chain — every later table, and
 * every response any of them held, with its request — stays reachable from old space until the next
 * mark-compact: each request's objects outlive the scavenges and are promoted. Under 64 writers that
 * was about 20–25 MB of promoted garbage a second, and RSS 250–270 against 183–189 MB now
 * (docs/benchmarks.md).
 *
 * Here each item has a slot of a plain array, emptied when it leaves: an item that left is referenced
 * by nothing kept here. The array grows to the most items ever in flight at once, and no further.
 */
export class InFlight<T extends object> {
  readonly #slots: (T | undefined)[] = [];
  /** Empty slots, reused before the array grows. */
  readonly #free: number[] = [];
  #size = 0;

  /** Keeps `item`; the slot to give back to `remove` (and to ask `holds` about). */
  add(item: T): number {
    const slot = this.#free.pop() ?? this.#slots.length;
    this.#slots[slot] = item;
    this.#size++;
    return slot;
  }

  /**
   * Lets go of `item`, which `add` gave `slot`. Nothing when the slot no longer holds it (removed
   * already, and maybe given to another item since). Once nothing is in flight the slots go too, so
   * that a burst does not keep its array for good.
   */
  remove(slot: number, item: T): void {
    if (this.#slots[slot] !== item) return;
    this.#slots[slot] = undefined;
    this.#size--;
    if (this.#size > 0) this.#free.push(slot);
    else this.#slots.length = this.#free.length = 0;
  }

  /** Whether `slot` still holds `item` (it was not removed, nor given to another item since). */
  holds(slot: number, item: T): boolean {
    return this.#slots[slot] === item;
  }

  get size(): number {
    return this.#size;
  }

  /** Every item in flight, with its slot. An item added during the walk may or may not be met. */
  *entries(): IterableIterator<[number, T]> {
    for (let slot = 0; slot < this.#slots.length; slot++) {
      const item = this.#slots[slot];
      if (item !== undefined) yield [slot, item];
    }
  }

  *[Symbol.iterator](): IterableIterator<T> {
    for (const [, item] of this.entries()) yield item;
  }
}
