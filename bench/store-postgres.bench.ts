// Postgres write benchmark: FencedPostgres against the plain statement a writer without fencing
// would send, on the same server in the same run, at concurrency 1 and 16. JSON lines on stdout.
//
// The comparisons, each with its goal (store-postgres-comparisons.ts):
// - "postgres-put": put() without ifVersion of key row/w under resource writer/w, a key that is not
//   its resource (the fence row locked FOR SHARE, then the owner-checked upsert, in one statement)
//   ÷ one INSERT … ON CONFLICT (key) DO UPDATE, autocommit, prepared. Goal 1.15.
// - "postgres-put-own": the same put() of a key that is its fence's resource (own/c/w), registered
//   and written once before the slices, so that every measured put finds the resource at the fence
//   it presents: the one-row path, one UPDATE of the record row ÷ postgres-put's plain upsert.
//   Goals 1.05 at concurrency 1, 1.10 at 16.
// - "postgres-recipe": the safe recipe — register() once per lease, then put() with ifVersion, each
//   put using the version the previous one returned — of key recipe/c/w/record under resource
//   recipe/c/w (not its own: the fence-row path) ÷ one compare-and-set INSERT … ON CONFLICT DO
//   UPDATE … WHERE version = $3 RETURNING version, autocommit, prepared. Goal 1.3.
// - "postgres-recipe-own": the recipe with the key its resource (recipe-own/c/w) ÷ the same
//   compare-and-set. Goals 1.05 at concurrency 1, 1.10 at 16.
// - "postgres-put-own-wal", "postgres-recipe-own-wal": each own-key line's WAL bytes per write,
//   fenced ÷ plain. Goal 1.10.
// - "postgres-one-lease": 32 writers of one lease (one resource, one fence), each writing a key of
//   its own ÷ the same writers each under a resource of its own: what sharing one fence row costs.
//   Goal 1.111 (one resource at ≥ 0.9× the throughput).
// - "postgres-scale": postgres-put's two sides, each writing a key drawn uniformly from 1,000,000
//   already written (the fenced side under 100,000 resources, each fence row already at the fence
//   the writes present), against their ratio on empty tables (postgres-put, same server, same run,
//   same concurrency): goal within 0.05 of it. What fencing's cost does with the size of the tables.
// And two lines for information, no goal:
// - "postgres-put-all": putAll() of PUT_ALL_RECORDS records under one fence (the ratchet and every
//   owner-checked upsert in one statement) ÷ one multi-row INSERT … SELECT FROM unnest … ON CONFLICT
//   DO UPDATE of as many records, autocommit, prepared; with each side's time per record.
// - "postgres-sync-floor": the plain upsert committed at a Sync sent only once its answer has arrived
//   (pg's `rows`), as FencedPostgres commits an unconditional put (PROTOCOL.md,
//   "Faults") ÷ the same upsert with its Sync sent along. What one more round trip per write costs
//   on this machine, whatever the statement: the part of the postgres-put ratio no change to the SQL
//   can remove.
// Each comparison alternates the two implementations in SLICES short slices (ABBA order), so that
// drift in the machine's load hits both alike, and reports the median of the per-slice ratios (not
// the best slice). Every statement either side sends is counted through the pool, so each line says
// how many round trips one operation took. Each line also says how many bytes of WAL one operation
// wrote (walBytesPerOp): the server's WAL insert position read before and after each slice, through
// the pool uncounted, one side running at a time; the median over the slices of the bytes ÷ the ops
// (store-postgres-compare.ts).
// Rows: with "per-worker", worker w writes row w under resource w (one lock per row: the normal
// deployment); with "shared" (for information, no goal), every worker writes one row under one
// resource: all writes serialise on one row lock.
import pg from "pg";
import { startPostgres } from "@fenced/servers";
import { FencedPostgres } from "@fenced/store/postgres";
import { type Op } from "./measure.js";
import { compare, countingPool } from "./store-postgres-compare.js";
import { HOLDER, PLAIN_SQL, value, type Impl } from "./store-postgres-comparisons.js";
import { oneLease, putAllLines, scale } from "./store-postgres-lines.js";
import { putOwn, recipe, type Setup } from "./store-postgres-own.js";

/** postgres-put, per worker and shared; its ratios on these empty tables, by concurrency. */
async function putLines({ store, counted, meter, context }: Setup, durable: boolean): Promise<Map<number, number>> {
  const emptyRatios = new Map<number, number>();
  for (const rows of durable ? (["per-worker"] as const) : (["per-worker", "shared"] as const)) {
    const row = (w: number): number => (rows === "shared" ? 0 : w);
    const impls: Record<Impl, Op> = {
      fenced: async (w, i) => {
        await store.put(`row/${row(w)}`, value(w, i), { fence: { resource: `writer/${row(w)}`, token: 1n, holder: HOLDER } });
      },
      plain: async (w, i) => {
        await counted.query({ name: "bench.plain", text: PLAIN_SQL.upsert, values: [`row/${row(w)}`, JSON.stringify(value(w, i))] });
      },
    };
    for (const concurrency of rows === "shared" ? [16] : [1, 16]) {
      const { ratio } = await compare("postgres-put", impls, meter, concurrency, { ...context, rows });
      if (rows === "per-worker") emptyRatios.set(concurrency, ratio);
    }
  }
  return emptyRatios;
}

/**
 * The same plain upsert on both sides, one statement per operation; the "fenced" side commits it as
 * FencedPostgres commits an unconditional put (Session.write): with `rows` set, pg sends the Sync
 * only once the statement's answer has arrived.
 */
async function syncFloor({ counted, meter, context }: Setup): Promise<void> {
  const upsert = (w: number, i: number) => ({
    name: "bench.plain",
    text: PLAIN_SQL.upsert,
    values: [`row/${w}`, JSON.stringify(value(w, i))],
  });
  const floor: Record<Impl, Op> = {
    fenced: async (w, i) => {
      await counted.query({ ...upsert(w, i), rows: 2 ** 31 - 1 });
    },
    plain: async (w, i) => {
      await counted.query(upsert(w, i));
    },
  };
  for (const concurrency of [1, 16]) await compare("postgres-sync-floor", floor, meter, concurrency, { ...context, rows: "per-worker" });
}

/**
 * One server, every comparison. "throwaway" is the test harness's server (fsync, synchronous commit
 * and full-page writes off): commits cost almost nothing, so the fenced write's extra row is as
 * visible as it can be. "durable" keeps PostgreSQL's defaults: every commit waits for a WAL flush.
 */
async function suite(durable: boolean): Promise<void> {
  const server = await startPostgres({ durable });
  const context = {
    server: durable ? "durable (fsync=on, synchronous_commit=on)" : "throwaway (fsync=off, synchronous_commit=off)",
    source: server.source,
  };
  const pool = new pg.Pool({ connectionString: server.url, max: 16 });
  const { counted, meter } = countingPool(pool);
  try {
    const store = new FencedPostgres(counted, { schema: "bench_fenced" });
    await store.migrate();
    await pool.query("DROP TABLE IF EXISTS bench_plain, bench_plain_v");
    await pool.query("CREATE TABLE bench_plain (key text PRIMARY KEY, value jsonb NOT NULL)");
    await pool.query("CREATE TABLE bench_plain_v (key text PRIMARY KEY, value jsonb NOT NULL, version bigint NOT NULL)");
    const setup: Setup = { store, counted, meter, context };
    const emptyRatios = await putLines(setup, durable);
    await putOwn(setup);
    await syncFloor(setup);
    await recipe(setup, false);
    await recipe(setup, true);
    await putAllLines(setup);
    await oneLease(server.url, context);
    if (durable) await scale(setup, emptyRatios);
  } finally {
    await pool.end();
    await server.stop();
  }
}

await suite(false);
await suite(true);
