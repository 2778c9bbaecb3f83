// How store-postgres.bench.ts compares two implementations: interleaved slices (ABBA), every
// statement counted, and the WAL each slice wrote read from the server's WAL insert position.
import type pg from "pg";
import { type PgClient, type PgQueryConfig, type PgQueryResult } from "@fenced/store/internal";
import { closedLoop, emit, median, percentile, type Op } from "./measure.js";
import { COMPARISONS, goalAt, type Bench, type Impl } from "./store-postgres-comparisons.js";

/** Time each implementation runs per comparison, in total over its slices. */
const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 3_000);
const SLICES = Number(process.env.BENCH_SLICES ?? 10);
const WARM_UP_MS = Math.min(500, DURATION_MS / 4);

/** What a comparison reads besides time: statements sent through the counted pool, and the server's WAL position. */
export interface Meter {
  readonly counter: { statements: number };
  /** The server's WAL insert position in bytes, read through a pool that is not counted. */
  readonly walPosition: () => Promise<bigint>;
}

/** An LSN as PostgreSQL prints it ("X/Y", two hex numbers of 32 bits) as a byte position. */
function lsnBytes(lsn: string): bigint {
  const [hi, lo] = lsn.split("/");
  if (hi === undefined || lo === undefined) throw new Error(`not an LSN: ${lsn}`);
  return (BigInt(`0x${hi}`) << 32n) + BigInt(`0x${lo}`);
}

/**
 * The pool, with every statement sent through it (or a client it lent) counted: one statement, one
 * round trip. The meter reads the WAL position through `pool` itself, uncounted. It reads the insert
 * position (pg_current_wal_insert_lsn), not the write position (pg_current_wal_lsn): with
 * synchronous_commit off a commit returns before its WAL is written, and the write position would
 * charge one slice's tail to the next.
 */
export function countingPool(pool: pg.Pool) {
  const counter = { statements: 0 };
  const send = <R>(db: pg.Pool | pg.PoolClient, config: PgQueryConfig): Promise<PgQueryResult<R>> => {
    counter.statements++;
    return db.query<R & pg.QueryResultRow>(config);
  };
  const counted = {
    query: <R>(config: PgQueryConfig) => send<R>(pool, config),
    connect: async (): Promise<PgClient> => {
      const client = await pool.connect();
      return { query: <R>(config: PgQueryConfig) => send<R>(client, config), release: (err?: Error | boolean) => client.release(err) };
    },
  };
  const walPosition = async (): Promise<bigint> => {
    const { rows } = await pool.query<{ lsn: string }>("SELECT pg_current_wal_insert_lsn()::text AS lsn");
    return lsnBytes(rows[0]?.lsn ?? "");
  };
  const meter: Meter = { counter, walPosition };
  return { counter, counted, meter };
}

export type Counted = ReturnType<typeof countingPool>["counted"];

interface Slice {
  ops: number;
  elapsedMs: number;
  statements: number;
  walBytes: number;
}

/** Runs `concurrency` workers for `durationMs`, appending each op's latency to `latencies`. */
async function slice(op: Op, concurrency: number, durationMs: number, latencies: number[], meter: Meter): Promise<Slice> {
  const statements0 = meter.counter.statements;
  const ops0 = latencies.length;
  const wal0 = await meter.walPosition();
  const elapsedMs = await closedLoop(op, concurrency, durationMs, latencies);
  const walBytes = Number((await meter.walPosition()) - wal0);
  return { ops: latencies.length - ops0, elapsedMs, statements: meter.counter.statements - statements0, walBytes };
}

export const round = (x: number, digits = 3): number => Number(x.toFixed(digits));

function describe(slices: readonly Slice[], latencies: number[]) {
  latencies.sort((a, b) => a - b);
  const pct = (p: number): number => round(percentile(latencies, p));
  const ops = slices.reduce((n, s) => n + s.ops, 0);
  const elapsed = slices.reduce((n, s) => n + s.elapsedMs, 0);
  const statements = slices.reduce((n, s) => n + s.statements, 0);
  return {
    ops,
    opsPerSec: Math.round((ops / elapsed) * 1000),
    p50Ms: pct(0.5),
    p99Ms: pct(0.99),
    roundTripsPerOp: round(statements / ops, 2),
    walBytesPerOp: Math.round(median(slices.map((s) => s.walBytes / s.ops))),
  };
}

type Described = ReturnType<typeof describe>;

/** What compare() found: the median time ratio, and each side's WAL bytes per operation. */
export interface Compared {
  readonly ratio: number;
  readonly walBytesPerOp: Readonly<Record<Impl, number>>;
}

/** Both implementations, interleaved slice by slice (ABBA), after a warm-up (connections, prepared statements, JIT). */
export async function compare(
  bench: Bench,
  impls: Record<Impl, Op>,
  meter: Meter,
  concurrency: number,
  context: Record<string, unknown>,
): Promise<Compared> {
  const latencies: Record<Impl, number[]> = { fenced: [], plain: [] };
  const slices: Record<Impl, Slice[]> = { fenced: [], plain: [] };
  for (const impl of ["fenced", "plain"] as const) await slice(impls[impl], concurrency, WARM_UP_MS, [], meter);
  const ratios: number[] = [];
  for (let s = 0; s < SLICES; s++) {
    const order: Impl[] = s % 2 === 0 ? ["fenced", "plain"] : ["plain", "fenced"];
    for (const impl of order) slices[impl].push(await slice(impls[impl], concurrency, DURATION_MS / SLICES, latencies[impl], meter));
    const [f, p] = [slices.fenced[s], slices.plain[s]];
    if (f === undefined || p === undefined) throw new Error("slice missing");
    ratios.push(f.elapsedMs / f.ops / (p.elapsedMs / p.ops));
  }
  const fenced = describe(slices.fenced, latencies.fenced);
  const plain = describe(slices.plain, latencies.plain);
  const ratio = round(median(ratios));
  emitComparison(bench, concurrency, context, { fenced, plain }, ratios);
  return { ratio, walBytesPerOp: { fenced: fenced.walBytesPerOp, plain: plain.walBytesPerOp } };
}

/** One line per side, then the comparison's line: ratio, goal, round trips and WAL per operation. */
function emitComparison(
  bench: Bench,
  concurrency: number,
  context: Record<string, unknown>,
  described: Record<Impl, Described>,
  ratios: readonly number[],
): void {
  const { goal: goals, sides, fenced: fencedKind, plain: plainKind } = COMPARISONS[bench];
  const { fenced, plain } = described;
  emit({ bench, impl: sides.fenced, ...context, concurrency, ...fenced, [sides.fenced]: fencedKind });
  emit({ bench, impl: sides.plain, ...context, concurrency, ...plain, [sides.plain]: plainKind });
  const ratio = round(median(ratios));
  const goal = goalAt(goals, concurrency);
  const records = context.records;
  const perRecord = (d: { opsPerSec: number }) => round(1e6 / d.opsPerSec / (typeof records === "number" ? records : 1), 1);
  const measured = goal !== null && context.rows === "per-worker";
  emit({
    bench,
    ...context,
    concurrency,
    ratio,
    ratioOf: `${sides.fenced} time per op ÷ ${sides.plain} time per op, median of ${SLICES} interleaved slices`,
    goal: measured ? goal : null,
    ...(measured
      ? { met: ratio <= goal }
      : { note: goal === null ? "for information, no goal" : "one row for all workers: for information, no goal" }),
    sliceRatios: { min: round(Math.min(...ratios)), max: round(Math.max(...ratios)) },
    roundTripsPerOp: { [sides.fenced]: fenced.roundTripsPerOp, [sides.plain]: plain.roundTripsPerOp },
    walBytesPerOp: { [sides.fenced]: fenced.walBytesPerOp, [sides.plain]: plain.walBytesPerOp },
    walBytesPerOpOf: "WAL insert position after each slice − before it, ÷ the slice's ops; median of the slices",
    ...(typeof records === "number"
      ? { microsecondsPerRecord: { [sides.fenced]: perRecord(fenced), [sides.plain]: perRecord(plain) }, note: "for information, no goal" }
      : {}),
    [sides.fenced]: fencedKind,
    [sides.plain]: plainKind,
  });
}
