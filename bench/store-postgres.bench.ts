// Postgres write benchmark: FencedPostgres against the plain statement a writer without fencing
// would send, on the same server in the same run, at concurrency 1 and 16. JSON lines on stdout.
//
// Three comparisons, each with its goal:
// - "postgres-put": put() without ifVersion (the ratchet, with a holder id as a Lease carries, and
//   the owner-checked upsert in one statement) ÷ one INSERT … ON CONFLICT (key) DO UPDATE, autocommit,
//   prepared. Goal 1.15.
// - "postgres-recipe": the safe recipe — register() once per lease, then put() with ifVersion, each
//   put using the version the previous one returned — ÷ one compare-and-set INSERT … ON CONFLICT DO
//   UPDATE … WHERE version = $3 RETURNING version, autocommit, prepared. Goal 1.3.
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
// how many round trips one operation took.
// Rows: with "per-worker", worker w writes row w under resource w (one lock per row: the normal
// deployment); with "shared" (for information, no goal), every worker writes one row under one
// resource: all writes serialise on one row lock.
import pg from "pg";
import { startPostgres } from "@fenced/servers";
import { FencedPostgres } from "@fenced/store/postgres";
import { type PgClient, type PgQueryConfig, type PgQueryResult } from "@fenced/store/internal";
import { closedLoop, emit, median, percentile, type Op } from "./measure.js";

/** Time each implementation runs per comparison, in total over its slices. */
const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 3_000);
const SLICES = Number(process.env.BENCH_SLICES ?? 10);
const WARM_UP_MS = Math.min(500, DURATION_MS / 4);
/** Concurrent writers of the one-lease comparison (each with a connection of its own). */
const ONE_LEASE_WRITERS = 32;
/** Records per putAll() in the postgres-put-all comparison. */
const PUT_ALL_RECORDS = 16;
/** What a Lease from @fenced/lock presents as its holder. */
const HOLDER = "5f0c1e8a9b7d4c3e2f1a0b9c8d7e6f5a";

const COMPARISONS: Record<Bench, { goal: number | null; sides: Record<Impl, string>; fenced: string; plain: string }> = {
  "postgres-put": {
    goal: 1.15,
    sides: { fenced: "fenced", plain: "plain" },
    fenced: "FencedPostgres.put without ifVersion: ratchet (token, holder) and owner-checked upsert in one statement",
    plain: "single statement INSERT … ON CONFLICT DO UPDATE, autocommit, prepared",
  },
  "postgres-recipe": {
    goal: 1.3,
    sides: { fenced: "fenced", plain: "plain" },
    fenced: "register() once per lease, then FencedPostgres.put with ifVersion (the version the previous put returned)",
    plain: "single statement compare-and-set INSERT … ON CONFLICT DO UPDATE … WHERE version = $3 RETURNING version, autocommit, prepared",
  },
  "postgres-one-lease": {
    // One resource's writers at ≥ 0.9× the throughput of the same writers spread over as many resources.
    goal: 1.111, // 1 / 0.9
    sides: { fenced: "one-resource", plain: "own-resources" },
    fenced: `${ONE_LEASE_WRITERS} writers of one lease (one resource, one fence), each its own key: FencedPostgres.put`,
    plain: `the same ${ONE_LEASE_WRITERS} writers, each under a resource of its own: FencedPostgres.put`,
  },
  "postgres-scale": {
    // Goal on the difference from postgres-put's ratio (SCALE_GOAL), not on this ratio.
    goal: null,
    sides: { fenced: "fenced", plain: "plain" },
    fenced: "FencedPostgres.put without ifVersion, a key drawn uniformly from 1,000,000 written under 100,000 resources",
    plain: "single statement INSERT … ON CONFLICT DO UPDATE, autocommit, prepared, a key drawn uniformly from 1,000,000 written",
  },
  "postgres-put-all": {
    goal: null,
    sides: { fenced: "fenced", plain: "plain" },
    fenced: `FencedPostgres.putAll of ${PUT_ALL_RECORDS} records under one fence, unconditional`,
    plain: `one multi-row INSERT … SELECT FROM unnest … ON CONFLICT DO UPDATE of ${PUT_ALL_RECORDS} records, autocommit, prepared`,
  },
  "postgres-sync-floor": {
    goal: null,
    sides: { fenced: "deferred-sync", plain: "plain" },
    fenced:
      "the plain upsert, its Sync (the commit) sent only once the statement's answer has arrived, as FencedPostgres commits an unconditional put",
    plain: "the same plain upsert, its Sync sent with it",
  },
};
type Bench = "postgres-put" | "postgres-recipe" | "postgres-put-all" | "postgres-sync-floor" | "postgres-one-lease" | "postgres-scale";
/** The scale comparison's tables, and how far its ratio may be from the one on empty tables. */
const SCALE = { keys: 1_000_000, resources: 100_000 } as const;
const SCALE_GOAL = 0.05;
type Impl = "fenced" | "plain";

/** The pool, with every statement sent through it (or a client it lent) counted: one statement, one round trip. */
function countingPool(pool: pg.Pool) {
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
  return { counter, counted };
}

interface Slice {
  ops: number;
  elapsedMs: number;
  statements: number;
}

/** Runs `concurrency` workers for `durationMs`, appending each op's latency to `latencies`. */
async function slice(
  op: Op,
  concurrency: number,
  durationMs: number,
  latencies: number[],
  counter: { statements: number },
): Promise<Slice> {
  const statements0 = counter.statements;
  const ops0 = latencies.length;
  const elapsedMs = await closedLoop(op, concurrency, durationMs, latencies);
  return { ops: latencies.length - ops0, elapsedMs, statements: counter.statements - statements0 };
}

const round = (x: number, digits = 3): number => Number(x.toFixed(digits));

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
  };
}

/** Both implementations, interleaved slice by slice (ABBA), after a warm-up (connections, prepared statements, JIT). */
async function compare(
  bench: Bench,
  impls: Record<Impl, Op>,
  counter: { statements: number },
  concurrency: number,
  context: Record<string, unknown>,
): Promise<number> {
  const latencies: Record<Impl, number[]> = { fenced: [], plain: [] };
  const slices: Record<Impl, Slice[]> = { fenced: [], plain: [] };
  for (const impl of ["fenced", "plain"] as const) await slice(impls[impl], concurrency, WARM_UP_MS, [], counter);
  const ratios: number[] = [];
  for (let s = 0; s < SLICES; s++) {
    const order: Impl[] = s % 2 === 0 ? ["fenced", "plain"] : ["plain", "fenced"];
    for (const impl of order) slices[impl].push(await slice(impls[impl], concurrency, DURATION_MS / SLICES, latencies[impl], counter));
    const [f, p] = [slices.fenced[s], slices.plain[s]];
    if (f === undefined || p === undefined) throw new Error("slice missing");
    ratios.push(f.elapsedMs / f.ops / (p.elapsedMs / p.ops));
  }
  const { goal, sides, fenced: fencedKind, plain: plainKind } = COMPARISONS[bench];
  const fenced = describe(slices.fenced, latencies.fenced);
  const plain = describe(slices.plain, latencies.plain);
  emit({ bench, impl: sides.fenced, ...context, concurrency, ...fenced, [sides.fenced]: fencedKind });
  emit({ bench, impl: sides.plain, ...context, concurrency, ...plain, [sides.plain]: plainKind });
  const ratio = round(median(ratios));
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
    ...(typeof records === "number"
      ? { microsecondsPerRecord: { [sides.fenced]: perRecord(fenced), [sides.plain]: perRecord(plain) }, note: "for information, no goal" }
      : {}),
    [sides.fenced]: fencedKind,
    [sides.plain]: plainKind,
  });
  return ratio;
}

/**
 * One server, both comparisons. "throwaway" is the test harness's server (fsync, synchronous commit
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
  const { counter, counted } = countingPool(pool);
  try {
    const store = new FencedPostgres(counted, { schema: "bench_fenced" });
    await store.migrate();
    await pool.query("DROP TABLE IF EXISTS bench_plain, bench_plain_v");
    await pool.query("CREATE TABLE bench_plain (key text PRIMARY KEY, value jsonb NOT NULL)");
    await pool.query("CREATE TABLE bench_plain_v (key text PRIMARY KEY, value jsonb NOT NULL, version bigint NOT NULL)");
    const upsert = "INSERT INTO bench_plain (key, value) VALUES ($1, $2::jsonb) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value";
    const cas =
      "INSERT INTO bench_plain_v (key, value, version) VALUES ($1, $2::jsonb, 1) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = bench_plain_v.version + 1 WHERE bench_plain_v.version = $3 RETURNING version";
    const value = (w: number, i: number): { writer: number; seq: number; note: string } => ({
      writer: w,
      seq: i,
      note: "invoice total updated",
    });

    const emptyRatios = new Map<number, number>();
    for (const rows of durable ? (["per-worker"] as const) : (["per-worker", "shared"] as const)) {
      const row = (w: number): number => (rows === "shared" ? 0 : w);
      const impls: Record<Impl, Op> = {
        fenced: async (w, i) => {
          await store.put(`row/${row(w)}`, value(w, i), { fence: { resource: `writer/${row(w)}`, token: 1n, holder: HOLDER } });
        },
        plain: async (w, i) => {
          await counted.query({ name: "bench.plain", text: upsert, values: [`row/${row(w)}`, JSON.stringify(value(w, i))] });
        },
      };
      for (const concurrency of rows === "shared" ? [16] : [1, 16]) {
        const ratio = await compare("postgres-put", impls, counter, concurrency, { ...context, rows });
        if (rows === "per-worker") emptyRatios.set(concurrency, ratio);
      }
    }

    // The same plain upsert on both sides, one statement per operation; the "fenced" side commits it as
    // FencedPostgres commits an unconditional put (Session.write): with `rows` set, pg sends the
    // Sync only once the statement's answer has arrived.
    const floor: Record<Impl, Op> = {
      fenced: async (w, i) => {
        await counted.query({ name: "bench.plain", text: upsert, values: [`row/${w}`, JSON.stringify(value(w, i))], rows: 2 ** 31 - 1 });
      },
      plain: async (w, i) => {
        await counted.query({ name: "bench.plain", text: upsert, values: [`row/${w}`, JSON.stringify(value(w, i))] });
      },
    };
    for (const concurrency of [1, 16])
      await compare("postgres-sync-floor", floor, counter, concurrency, { ...context, rows: "per-worker" });

    for (const concurrency of [1, 16]) {
      // Each worker is one lease on a resource and key of its own: it registers once (fence-on-acquire),
      // then every put names the version its previous put returned. A refusal would throw and end the run.
      const versions = new Map<number, string>();
      const plainVersions = new Map<number, string>();
      const resource = (w: number): string => `recipe/${concurrency}/${w}`;
      for (let w = 0; w < concurrency; w++) {
        const fence = { resource: resource(w), token: 1n, holder: HOLDER };
        await store.register(fence);
        versions.set(w, (await store.put(resource(w), value(w, 0), { fence })).version);
        const { rows } = await pool.query<{ version: string }>({ text: cas, values: [resource(w), JSON.stringify(value(w, 0)), "0"] });
        plainVersions.set(w, rows[0]?.version ?? "missing");
      }
      const recipe: Record<Impl, Op> = {
        fenced: async (w, i) => {
          const r = await store.put(resource(w), value(w, i), {
            fence: { resource: resource(w), token: 1n, holder: HOLDER },
            ifVersion: versions.get(w),
          });
          versions.set(w, r.version);
        },
        plain: async (w, i) => {
          const { rows } = await counted.query<{ version: string }>({
            name: "bench.plain_cas",
            text: cas,
            values: [resource(w), JSON.stringify(value(w, i)), plainVersions.get(w) ?? "missing"],
          });
          const written = rows[0]?.version;
          if (written === undefined)
            throw new Error(`the plain compare-and-set of ${resource(w)} was refused: the benchmark lost track of its version`);
          plainVersions.set(w, written);
        },
      };
      await compare("postgres-recipe", recipe, counter, concurrency, { ...context, rows: "per-worker" });
    }
    await putAllLines(store, counted, counter, context);
    await oneLease(server.url, context);
    if (durable) await scale(store, counted, counter, context, emptyRatios);
  } finally {
    await pool.end();
    await server.stop();
  }
}

/**
 * postgres-put at scale: SCALE.keys records written under SCALE.resources resources on the fenced
 * side, as many rows in the plain table, then both sides write keys drawn uniformly from them. The
 * tables are filled with one INSERT … SELECT each (the layout of PROTOCOL.md, "Layout": what a
 * million put() calls would leave, minutes faster), then vacuumed and analysed alike, and checkpointed.
 */
async function scale(
  store: FencedPostgres,
  counted: ReturnType<typeof countingPool>["counted"],
  counter: { statements: number },
  context: Record<string, unknown>,
  emptyRatios: ReadonlyMap<number, number>,
): Promise<void> {
  const db = (text: string, values: readonly (string | number)[] = []): Promise<unknown> =>
    counted.query({ text, values: values.map(String) });
  const started = performance.now();
  await db(
    `INSERT INTO bench_fenced.fence (resource, token, holder)
SELECT 'scale/' || r, 1, $1 FROM generate_series(0, $2::int - 1) r ON CONFLICT (resource) DO NOTHING`,
    [HOLDER, SCALE.resources],
  );
  await db(
    `INSERT INTO bench_fenced.records (key, value, token, resource, holder)
SELECT 'scale/' || k, '{"note": "invoice total updated"}', 1, 'scale/' || (k % $2::int), $1 FROM generate_series(0, $3::int - 1) k
ON CONFLICT (key) DO NOTHING`,
    [HOLDER, SCALE.resources, SCALE.keys],
  );
  await db("DROP TABLE IF EXISTS bench_scale_plain");
  await db("CREATE TABLE bench_scale_plain (key text PRIMARY KEY, value jsonb NOT NULL)");
  await db(
    `INSERT INTO bench_scale_plain (key, value)
SELECT 'scale/' || k, '{"note": "invoice total updated"}' FROM generate_series(0, $1::int - 1) k`,
    [SCALE.keys],
  );
  await db("VACUUM ANALYZE bench_fenced.fence, bench_fenced.records, bench_scale_plain");
  // The fill's WAL would otherwise be checkpointed during the first slices, whichever side they are.
  await db("CHECKPOINT");
  const fillMs = Math.round(performance.now() - started);
  const upsert = "INSERT INTO bench_scale_plain (key, value) VALUES ($1, $2::jsonb) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value";
  const pick = (): number => Math.floor(Math.random() * SCALE.keys);
  const impls: Record<Impl, Op> = {
    fenced: async (w, i) => {
      const k = pick();
      const fence = { resource: `scale/${k % SCALE.resources}`, token: 1n, holder: HOLDER };
      await store.put(`scale/${k}`, { writer: w, seq: i, note: "invoice total updated" }, { fence });
    },
    plain: async (w, i) => {
      await counted.query({
        name: "bench.scale_plain",
        text: upsert,
        values: [`scale/${pick()}`, JSON.stringify({ writer: w, seq: i, note: "invoice total updated" })],
      });
    },
  };
  for (const concurrency of [1, 16]) {
    const ratio = await compare("postgres-scale", impls, counter, concurrency, { ...context, rows: "uniform", ...SCALE });
    const empty = emptyRatios.get(concurrency);
    if (empty === undefined) throw new Error(`no postgres-put ratio at concurrency ${concurrency}`);
    const delta = round(ratio - empty);
    emit({
      bench: "postgres-scale-delta",
      ...context,
      concurrency,
      ...SCALE,
      ratio,
      emptyRatio: empty,
      delta,
      ratioOf: "postgres-scale's ratio − postgres-put's (empty tables), same server and run",
      goal: SCALE_GOAL,
      met: Math.abs(delta) <= SCALE_GOAL,
      fillMs,
    });
  }
}

/** postgres-put-all: each worker writes PUT_ALL_RECORDS keys of its own under a resource of its own. */
async function putAllLines(
  store: FencedPostgres,
  counted: ReturnType<typeof countingPool>["counted"],
  counter: { statements: number },
  context: Record<string, unknown>,
): Promise<void> {
  await counted.query({ text: "DROP TABLE IF EXISTS bench_plain_all", values: [] });
  await counted.query({ text: "CREATE TABLE bench_plain_all (key text PRIMARY KEY, value jsonb NOT NULL)", values: [] });
  const upsert = `INSERT INTO bench_plain_all (key, value) SELECT k, v::jsonb FROM unnest($1::text[], $2::text[]) AS t(k, v)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`;
  const keys = (w: number): string[] => Array.from({ length: PUT_ALL_RECORDS }, (_, i) => `all/${w}/${i}`);
  const value = (w: number, i: number) => ({ writer: w, seq: i, note: "invoice total updated" });
  const array = (xs: readonly string[]): string => `{${xs.map((x) => `"${x.replace(/[\\"]/g, "\\$&")}"`).join(",")}}`;
  const impls: Record<Impl, Op> = {
    fenced: async (w, i) => {
      await store.putAll(
        keys(w).map((key) => ({ key, value: value(w, i) })),
        { fences: [{ resource: `all/${w}`, token: 1n, holder: HOLDER }] },
      );
    },
    plain: async (w, i) => {
      const ks = keys(w);
      await counted.query({ name: "bench.plain_all", text: upsert, values: [array(ks), array(ks.map(() => JSON.stringify(value(w, i))))] });
    },
  };
  for (const concurrency of [1, 16])
    await compare("postgres-put-all", impls, counter, concurrency, { ...context, rows: "per-worker", records: PUT_ALL_RECORDS });
}

/**
 * One lease's writes side by side: ONE_LEASE_WRITERS writers under one resource and fence, each
 * writing a key of its own, against the same writers each under a resource of its own (where no two
 * share a fence row). Both sides are the fenced store; the ratio is what sharing a resource costs.
 */
async function oneLease(url: string, context: Record<string, unknown>): Promise<void> {
  const pool = new pg.Pool({ connectionString: url, max: ONE_LEASE_WRITERS });
  const { counter, counted } = countingPool(pool);
  try {
    const store = new FencedPostgres(counted, { schema: "bench_fenced" });
    const value = { note: "invoice total updated" };
    const impls: Record<Impl, Op> = {
      fenced: async (w) => {
        await store.put(`one-lease/${w}`, value, { fence: { resource: "one-lease", token: 1n, holder: HOLDER } });
      },
      plain: async (w) => {
        await store.put(`own-resource/${w}`, value, { fence: { resource: `own-resource/${w}`, token: 1n, holder: HOLDER } });
      },
    };
    await compare("postgres-one-lease", impls, counter, ONE_LEASE_WRITERS, { ...context, rows: "per-worker" });
  } finally {
    await pool.end();
  }
}

await suite(false);
await suite(true);
