import { mulberry32 } from "@fenced/servers/random";

/**
 * A small seeded PRNG (mulberry32). Math.random cannot be seeded, and the fault schedule must be
 * the same for the same seed so that the three configurations face identical faults and a failing
 * run can be replayed.
 */
export class Random {
  private readonly generator: () => number;

  constructor(seed: number) {
    // Mix the seed once so that neighbouring seeds (1, 2, 3) do not start with similar streams.
    this.generator = mulberry32(hash32(seed >>> 0));
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.generator();
  }

  /** Uniform integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  /** Uniform in [min, max). */
  between(min: number, max: number): number {
    return min + this.next() * (max - min);
  }

  pick<T>(items: readonly T[]): T {
    const item = items[Math.floor(this.next() * items.length)];
    if (item === undefined) throw new Error("pick from an empty list");
    return item;
  }

  /** A shuffled copy (Fisher–Yates). */
  shuffle<T>(items: readonly T[]): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
      const j = this.int(0, i);
      [out[i], out[j]] = [out[j] as T, out[i] as T];
    }
    return out;
  }

  /** Picks a key with probability proportional to its weight. */
  weighted<K extends string>(weights: Readonly<Record<K, number>>): K {
    const entries = Object.entries(weights) as [K, number][];
    const total = entries.reduce((sum, [, w]) => sum + w, 0);
    let roll = this.next() * total;
    for (const [key, weight] of entries) {
      roll -= weight;
      if (roll < 0) return key;
    }
    const last = entries[entries.length - 1];
    if (last === undefined) throw new Error("weighted pick from no weights");
    return last[0];
  }
}

/** Integer hash (a murmur3 finaliser) used to derive independent seeds, e.g. one per worker. */
export function hash32(x: number): number {
  let h = x >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}
