// What every benchmark shares: a closed-loop load of `concurrency` workers for a fixed time,
// and JSON-lines output.

export interface Measured {
  readonly ops: number;
  readonly opsPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
}

/** An operation of worker `worker`; `i` counts operations across all workers. */
export type Op = (worker: number, i: number) => Promise<void>;

export async function measure(op: Op, concurrency: number, durationMs: number): Promise<Measured> {
  const latencies: number[] = [];
  const start = performance.now();
  const end = start + durationMs;
  let i = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      while (performance.now() < end) {
        const t0 = performance.now();
        await op(worker, i++);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const elapsed = performance.now() - start;
  latencies.sort((a, b) => a - b);
  const pct = (p: number): number => Number((latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))] ?? 0).toFixed(3));
  return { ops: latencies.length, opsPerSec: Math.round((latencies.length / elapsed) * 1000), p50Ms: pct(0.5), p99Ms: pct(0.99) };
}

export function emit(line: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

/** The median of `xs` (the mean of the middle two for an even count); NaN for none. */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  if (s.length === 0) return Number.NaN;
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}
