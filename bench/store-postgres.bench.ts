// Postgres write benchmark: FencedPostgres.put against a plain upsert of the same row, on the same
// server in the same run, at concurrency 1 and 16. JSON lines on stdout.
//
// "plain" is what a writer without fencing sends: one INSERT … ON CONFLICT (key) DO UPDATE statement
// in autocommit (its own implicit transaction), prepared like ours. "fenced" is put() without
// ifVersion: the ratchet and the upsert in one statement. Rows: with "per-worker", worker w writes
// row w under resource w (one lock per row: the normal deployment); with "shared", every worker
// writes the same row under the same resource (worst case: all writes serialise on one row lock).
import pg from "pg";
import { startPostgres } from "@fenced/servers";
import { FencedPostgres } from "@fenced/store";

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 2_000);
const ROUNDS = 2;
const GOAL = 1.15;
const PLAIN_KIND = "single statement INSERT … ON CONFLICT DO UPDATE, autocommit, prepared";

type Op = (worker: number, i: number) => Promise<void>;
interface Measured {
  ops: number;
  opsPerSec: number;
  p50Ms: number;
  p99Ms: number;
}

async function measure(op: Op, concurrency: number, durationMs: number): Promise<Measured> {
  const latencies: number[] = [];
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
  const elapsed = performance.now() - start;
  latencies.sort((a, b) => a - b);
  const pct = (p: number): number => Number((latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))] ?? 0).toFixed(3));
  return { ops: latencies.length, opsPerSec: Math.round((latencies.length / elapsed) * 1000), p50Ms: pct(0.5), p99Ms: pct(0.99) };
}

function emit(line: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

const server = await startPostgres();
const pool = new pg.Pool({ connectionString: server.url, max: 16 });
try {
  const store = new FencedPostgres(pool, { schema: "bench_fenced" });
  await store.migrate();
  await pool.query("DROP TABLE IF EXISTS bench_plain");
  await pool.query("CREATE TABLE bench_plain (key text PRIMARY KEY, value jsonb NOT NULL)");
  const upsert = { name: "bench.plain", text: "INSERT INTO bench_plain (key, value) VALUES ($1, $2::jsonb) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value" };
  const value = (w: number, i: number): { writer: number; seq: number; note: string } => ({ writer: w, seq: i, note: "invoice total updated" });

  for (const rows of ["per-worker", "shared"] as const) {
    const row = (w: number): number => (rows === "shared" ? 0 : w);
    const impls: Record<"fenced" | "plain", Op> = {
      fenced: async (w, i) => {
        await store.put(`row/${row(w)}`, value(w, i), { fence: { resource: `writer/${row(w)}`, token: 1n } });
      },
      plain: async (w, i) => {
        await pool.query({ ...upsert, values: [`row/${row(w)}`, JSON.stringify(value(w, i))] });
      },
    };
    for (const concurrency of rows === "shared" ? [16] : [1, 16]) {
      const best: Record<string, Measured> = {};
      // Alternate the two so that drift in the machine's load (autovacuum, checkpoints) hits both alike.
      for (let round = 0; round < ROUNDS; round++) {
        for (const [impl, op] of Object.entries(impls)) {
          await measure(op, concurrency, 300); // warm-up: connections, prepared statements, JIT
          const r = await measure(op, concurrency, DURATION_MS);
          emit({ bench: "postgres-put", impl, rows, concurrency, round, ...r, ...(impl === "plain" ? { plain: PLAIN_KIND } : {}) });
          if ((best[impl]?.opsPerSec ?? 0) < r.opsPerSec) best[impl] = r;
        }
      }
      const ratio = (best.plain?.opsPerSec ?? 0) / (best.fenced?.opsPerSec ?? 1);
      emit({ bench: "postgres-put", rows, concurrency, ratio: Number(ratio.toFixed(3)), ratioOf: "fenced time per op ÷ plain time per op (best round each)", goal: GOAL, plain: PLAIN_KIND });
    }
  }

  // Conditional writes (ifVersion) take the transaction path; reported for information against the
  // plain equivalent, one UPDATE … WHERE key AND version statement.
  await pool.query("DROP TABLE IF EXISTS bench_plain_v");
  await pool.query("CREATE TABLE bench_plain_v (key text PRIMARY KEY, value jsonb NOT NULL, version bigint NOT NULL)");
  const versions = new Map<number, string>();
  const plainVersions = new Map<number, number>();
  const conditional: Record<"fenced" | "plain", Op> = {
    fenced: async (w, i) => {
      const fence = { resource: `cond/${w}`, token: 1n };
      const ifVersion = versions.get(w);
      const r = await store.put(`cond/${w}`, value(w, i), ifVersion === undefined ? { fence } : { fence, ifVersion });
      versions.set(w, r.version);
    },
    plain: async (w, i) => {
      const v = plainVersions.get(w) ?? 0;
      const sql = "INSERT INTO bench_plain_v (key, value, version) VALUES ($1, $2::jsonb, 1) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = bench_plain_v.version + 1 WHERE bench_plain_v.version = $3 RETURNING version";
      const { rows } = await pool.query<{ version: string }>({ name: "bench.plain_v", text: sql, values: [`cond/${w}`, JSON.stringify(value(w, i)), String(v)] });
      plainVersions.set(w, Number(rows[0]?.version ?? v));
    },
  };
  for (const concurrency of [1, 16]) {
    const best: Record<string, Measured> = {};
    for (let round = 0; round < ROUNDS; round++) {
      for (const [impl, op] of Object.entries(conditional)) {
        await measure(op, concurrency, 300);
        const r = await measure(op, concurrency, DURATION_MS);
        emit({ bench: "postgres-put-ifversion", impl, rows: "per-worker", concurrency, round, ...r });
        if ((best[impl]?.opsPerSec ?? 0) < r.opsPerSec) best[impl] = r;
      }
    }
    const ratio = (best.plain?.opsPerSec ?? 0) / (best.fenced?.opsPerSec ?? 1);
    emit({ bench: "postgres-put-ifversion", rows: "per-worker", concurrency, ratio: Number(ratio.toFixed(3)), ratioOf: "fenced time per op ÷ plain conditional upsert time per op", goal: null });
  }
} finally {
  await pool.end();
  await server.stop();
}
