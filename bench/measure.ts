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

/**
 * The closed loop every benchmark runs: `concurrency` workers, each starting its next op as soon as
 * the last one answered, for `durationMs`. Appends each op's latency (ms) to `latencies`; resolves
 * with the elapsed ms.
 */
export async function closedLoop(op: Op, concurrency: number, durationMs: number, latencies: number[]): Promise<number> {
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
  return performance.now() - start;
}

/**
 * The closed loop by count: `count` ops by `concurrency` workers, each starting its next as soon as
 * the last one answered. Resolves with the nanoseconds an op (the elapsed time ÷ `count`).
 */
export async function nsPerOp(op: (worker: number, i: number) => Promise<unknown>, concurrency: number, count: number): Promise<number> {
  let next = 0;
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      while (next < count) await op(worker, next++);
    }),
  );
  return Number(process.hrtime.bigint() - started) / count;
}

/** What nsPerCall's calls return, kept so that no call is dropped as dead code. */
const kept: unknown[] = new Array(64);

/** In process: nanoseconds a call of `f` over `calls` calls, each given the next of `inputs` in turn. */
export function nsPerCall<T>(inputs: readonly T[], f: (input: T) => unknown, calls: number): number {
  const started = process.hrtime.bigint();
  for (let i = 0; i < calls; i++) kept[i & 63] = f(inputs[i % inputs.length] as T);
  return Number(process.hrtime.bigint() - started) / calls;
}

/** The value at fraction `p` of `sorted` (ascending), 0 for none. */
export function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? 0;
}

export async function measure(op: Op, concurrency: number, durationMs: number): Promise<Measured> {
  const latencies: number[] = [];
  const elapsed = await closedLoop(op, concurrency, durationMs, latencies);
  latencies.sort((a, b) => a - b);
  return {
    ops: latencies.length,
    opsPerSec: Math.round((latencies.length / elapsed) * 1000),
    p50Ms: round3(percentile(latencies, 0.5)),
    p99Ms: round3(percentile(latencies, 0.99)),
  };
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

export function round3(x: number): number {
  return Number(x.toFixed(3));
}

/** One build's figures ÷ another's, round by round (interleaved): the median, and the least and most. */
export function overBase(
  now: readonly number[],
  base: readonly number[],
): Record<"thisOverBase" | "thisOverBaseMin" | "thisOverBaseMax", number> {
  const ratios = now.map((n, i) => n / (base[i] as number));
  return {
    thisOverBase: round3(median(ratios)),
    thisOverBaseMin: round3(Math.min(...ratios)),
    thisOverBaseMax: round3(Math.max(...ratios)),
  };
}

/**
 * Open-loop load: starts one `op` every 1000/rate ms for `durationMs`, whether or not earlier ones
 * have finished, and times each from its scheduled start (a stalled server delays every op behind
 * it, which a closed loop would hide). Worker ids cycle over 64 so ops stay on distinct rows. Each
 * op's latency (ms) is appended to `latencies`, so that rounds can be pooled (latencyOf).
 */
export async function openLoop(op: Op, ratePerSec: number, durationMs: number, latencies: number[] = []): Promise<Latency> {
  const interval = 1000 / ratePerSec;
  const start = performance.now();
  const mine: number[] = [];
  const pending: Promise<void>[] = [];
  for (let i = 0; ; i++) {
    const scheduled = start + i * interval;
    if (scheduled > start + durationMs) break;
    const wait = scheduled - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    // Timed from the scheduled start, or from the launch when that is earlier: a wait under 1 ms is
    // not slept (timers are not that fine), and no answer may come before its own request went out.
    const from = Math.min(scheduled, performance.now());
    pending.push(op(i % 64, i).then(() => void mine.push(performance.now() - from)));
  }
  await Promise.all(pending);
  latencies.push(...mine);
  return latencyOf(mine);
}

export interface Latency {
  readonly ops: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
}

/** Count, median, 99th percentile and maximum of latencies in ms. */
export function latencyOf(latencies: readonly number[]): Latency {
  const sorted = [...latencies].sort((a, b) => a - b);
  const pct = (p: number): number => round3(percentile(sorted, p));
  return { ops: sorted.length, p50Ms: pct(0.5), p99Ms: pct(0.99), maxMs: pct(1) };
}

/**
 * Requests per operation from counts by kind: those added since `before` (none by default), over
 * `ops` operations, in all and by kind (a kind that did not move is left out), to two decimals.
 */
export function requestsPerOp(
  counts: ReadonlyMap<string, number>,
  ops: number,
  before: ReadonlyMap<string, number> = new Map(),
): { perOp: number; byKind: Record<string, number> } {
  const byKind: Record<string, number> = {};
  let total = 0;
  for (const [kind, n] of counts) {
    const added = n - (before.get(kind) ?? 0);
    if (added === 0) continue;
    byKind[kind] = Number((added / ops).toFixed(2));
    total += added;
  }
  return { perOp: Number((total / ops).toFixed(2)), byKind };
}
