// Postgres write benchmark: FencedPostgres.put against a plain upsert of the same row, on the same
// server in the same run, at concurrency 1 and 16. JSON lines on stdout.
//
// "plain" is what a writer without fencing sends: one INSERT … ON CONFLICT (key) DO UPDATE statement
// in autocommit (its own implicit transaction), prepared like ours. "fenced" is put() without
// ifVersion: the ratchet (token and holder) and the owner-checked upsert in one statement. Its fence
// carries a holder id as a Lease does (32 hex digits), so the identity check is measured too.
// Rows: with "per-worker", worker w writes row w under resource w (one lock per row: the normal
// deployment); with "shared", every worker writes the same row under the same resource (worst case:
// all writes serialise on one row lock).
import pg from "pg";
import { startPostgres } from "@fenced/servers";
import { FencedPostgres } from "@fenced/store/postgres";

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 3_000);
// Each implementation runs for DURATION_MS in total, in SLICES alternating slices: drift in the
// machine's load (autovacuum, checkpoints, other processes) then hits both alike.
const SLICES = 6;
const GOAL = 1.15;
const PLAIN_KIND = "single statement INSERT … ON CONFLICT DO UPDATE, autocommit, prepared";
/** What a Lease from @fenced/lock presents as its holder. */
const HOLDER = "5f0c1e8a9b7d4c3e2f1a0b9c8d7e6f5a";
const PLAIN_IF_KIND = "single statement INSERT … ON CONFLICT DO UPDATE … WHERE version = $3, autocommit, prepared";

type Op = (worker: number, i: number) => Promise<void>;
interface Measured {
  ops: number;
  opsPerSec: number;
  p50Ms: number;
  p99Ms: number;
}

/** Runs `concurrency` workers for `durationMs`, appending each op's latency to `latencies`; returns the elapsed ms. */
async function run(op: Op, concurrency: number, durationMs: number, latencies: number[]): Promise<number> {
  const start = performance.now();
  const end = start + durationMs;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      for (let i = 0; performance.now() < end; i++) {
        const t0 = performance.now();
        await op(worker, i);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  return performance.now() - start;
}

function summarise(latencies: number[], elapsedMs: number): Measured {
  latencies.sort((a, b) => a - b);
  const pct = (p: number): number => Number((latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))] ?? 0).toFixed(3));
  return { ops: latencies.length, opsPerSec: Math.round((latencies.length / elapsedMs) * 1000), p50Ms: pct(0.5), p99Ms: pct(0.99) };
}

/** Both implementations, interleaved slice by slice, after a warm-up (connections, prepared statements, JIT). */
async function compare(impls: Record<"fenced" | "plain", Op>, concurrency: number): Promise<Record<"fenced" | "plain", Measured>> {
  const latencies = { fenced: [] as number[], plain: [] as number[] };
  const elapsed = { fenced: 0, plain: 0 };
  for (const impl of ["fenced", "plain"] as const) await run(impls[impl], concurrency, 300, []);
  for (let slice = 0; slice < SLICES; slice++) {
    for (const impl of ["fenced", "plain"] as const) elapsed[impl] += await run(impls[impl], concurrency, DURATION_MS / SLICES, latencies[impl]);
  }
  return { fenced: summarise(latencies.fenced, elapsed.fenced), plain: summarise(latencies.plain, elapsed.plain) };
}

function emit(line: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

/**
 * One server, both implementations. "throwaway" is the test harness's server (fsync, synchronous
 * commit and full-page writes off): commits cost almost nothing, so the fenced write's extra row is
 * as visible as it can be. "durable" keeps PostgreSQL's defaults: every commit waits for a WAL flush.
 */
async function suite(durable: boolean): Promise<void> {
  const server = await startPostgres({ durable });
  const setting = { server: durable ? "durable (fsync=on, synchronous_commit=on)" : "throwaway (fsync=off, synchronous_commit=off)", source: server.source };
  const pool = new pg.Pool({ connectionString: server.url, max: 16 });
  try {
    const store = new FencedPostgres(pool, { schema: "bench_fenced" });
    await store.migrate();
    await pool.query("DROP TABLE IF EXISTS bench_plain, bench_plain_v");
    await pool.query("CREATE TABLE bench_plain (key text PRIMARY KEY, value jsonb NOT NULL)");
    await pool.query("CREATE TABLE bench_plain_v (key text PRIMARY KEY, value jsonb NOT NULL, version bigint NOT NULL)");
    const upsert = "INSERT INTO bench_plain (key, value) VALUES ($1, $2::jsonb) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value";
    const casUpsert = "INSERT INTO bench_plain_v (key, value, version) VALUES ($1, $2::jsonb, 1) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = bench_plain_v.version + 1 WHERE bench_plain_v.version = $3 RETURNING version";
    const value = (w: number, i: number): { writer: number; seq: number; note: string } => ({ writer: w, seq: i, note: "invoice total updated" });

    for (const rows of durable ? (["per-worker"] as const) : (["per-worker", "shared"] as const)) {
      const row = (w: number): number => (rows === "shared" ? 0 : w);
      const impls: Record<"fenced" | "plain", Op> = {
        fenced: async (w, i) => {
          await store.put(`row/${row(w)}`, value(w, i), { fence: { resource: `writer/${row(w)}`, token: 1n, holder: HOLDER } });
        },
        plain: async (w, i) => {
          await pool.query({ name: "bench.plain", text: upsert, values: [`row/${row(w)}`, JSON.stringify(value(w, i))] });
        },
      };
      for (const concurrency of rows === "shared" ? [16] : [1, 16]) {
        const r = await compare(impls, concurrency);
        emit({ bench: "postgres-put", impl: "fenced", ...setting, rows, concurrency, ...r.fenced });
        emit({ bench: "postgres-put", impl: "plain", ...setting, rows, concurrency, ...r.plain, plain: PLAIN_KIND });
        const ratio = r.plain.opsPerSec / r.fenced.opsPerSec;
        emit({ bench: "postgres-put", ...setting, rows, concurrency, ratio: Number(ratio.toFixed(3)), ratioOf: "fenced time per op ÷ plain time per op", goal: GOAL, plain: PLAIN_KIND });
      }
    }

    // Conditional writes (ifVersion) run BEGIN; ratchet + conditional update; COMMIT. Reported for
    // information against the plain equivalent: one compare-and-set upsert on a version column.
    const versions = new Map<number, string>();
    const plainVersions = new Map<number, string>();
    const conditional: Record<"fenced" | "plain", Op> = {
      fenced: async (w, i) => {
        const fence = { resource: `cond/${w}`, token: 1n, holder: HOLDER };
        const ifVersion = versions.get(w);
        const r = await store.put(`cond/${w}`, value(w, i), ifVersion === undefined ? { fence } : { fence, ifVersion });
        versions.set(w, r.version);
      },
      plain: async (w, i) => {
        const v = plainVersions.get(w) ?? "0";
        const { rows } = await pool.query<{ version: string }>({ name: "bench.plain_v", text: casUpsert, values: [`cond/${w}`, JSON.stringify(value(w, i)), v] });
        plainVersions.set(w, rows[0]?.version ?? v);
      },
    };
    for (const concurrency of durable ? [1] : [1, 16]) {
      const r = await compare(conditional, concurrency);
      emit({ bench: "postgres-put-ifversion", impl: "fenced", ...setting, rows: "per-worker", concurrency, ...r.fenced });
      emit({ bench: "postgres-put-ifversion", impl: "plain", ...setting, rows: "per-worker", concurrency, ...r.plain, plain: PLAIN_IF_KIND });
      const ratio = r.plain.opsPerSec / r.fenced.opsPerSec;
      emit({ bench: "postgres-put-ifversion", ...setting, rows: "per-worker", concurrency, ratio: Number(ratio.toFixed(3)), ratioOf: "fenced time per op ÷ plain time per op", goal: null, plain: PLAIN_IF_KIND });
    }
  } finally {
    await pool.end();
    await server.stop();
  }
}

await suite(false);
await suite(true);
