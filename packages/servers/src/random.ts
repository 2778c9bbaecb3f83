/**
 * A small seeded generator (mulberry32), uniform in [0, 1): Math.random cannot be seeded, and a run
 * (a fault schedule, a test's latencies) must be the same for the same seed so that a failing one can
 * be replayed. The one definition, for the tests and the chaos run: `@fenced/servers/random` loads
 * nothing else of this package (no server, no client).
 */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
