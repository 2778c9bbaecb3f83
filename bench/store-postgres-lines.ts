// The lines of store-postgres.bench.ts on more than one row per write, or on full tables:
// postgres-put-all, postgres-one-lease and postgres-scale.
import pg from "pg";
import { FencedPostgres } from "@fenced/store/postgres";
import { emit, type Op } from "./measure.js";
import { compare, countingPool, round } from "./store-postgres-compare.js";
import { HOLDER, ONE_LEASE_WRITERS, PUT_ALL_RECORDS, SCALE, SCALE_GOAL, type Impl } from "./store-postgres-comparisons.js";
import type { Setup } from "./store-postgres-own.js";

/**
 * postgres-put at scale: SCALE.keys records written under SCALE.resources resources on the fenced
 * side, as many rows in the plain table, then both sides write keys drawn uniformly from them. The
 * tables are filled with one INSERT … SELECT each (the layout of PROTOCOL.md, "Layout": what a
 * million put() calls would leave, minutes faster), then vacuumed and analysed alike, and checkpointed.
 */
export async function scale({ store, counted, meter, context }: Setup, emptyRatios: ReadonlyMap<number, number>): Promise<void> {
  const db = (text: string, values: readonly (string | number)[] = []): Promise<unknown> =>
    counted.query({ text, values: values.map(String) });
  const started = performance.now();
  await db(
    `INSERT INTO bench_fenced.fence (resource, token, holder)
SELECT 'scale-r/' || r, 1, $1 FROM generate_series(0, $2::int - 1) r ON CONFLICT (resource) DO NOTHING`,
    [HOLDER, SCALE.resources],
  );
  await db(
    // No key is its resource's name: every write takes the fence-row path, as postgres-put's do.
    `INSERT INTO bench_fenced.records (key, value, token, resource, holder)
SELECT 'scale/' || k, '{"note": "invoice total updated"}', 1, 'scale-r/' || (k % $2::int), $1 FROM generate_series(0, $3::int - 1) k
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
      const fence = { resource: `scale-r/${k % SCALE.resources}`, token: 1n, holder: HOLDER };
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
    const { ratio } = await compare("postgres-scale", impls, meter, concurrency, { ...context, rows: "uniform", ...SCALE });
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
export async function putAllLines({ store, counted, meter, context }: Setup): Promise<void> {
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
    await compare("postgres-put-all", impls, meter, concurrency, { ...context, rows: "per-worker", records: PUT_ALL_RECORDS });
}

/**
 * One lease's writes side by side: ONE_LEASE_WRITERS writers under one resource and fence, each
 * writing a key of its own, against the same writers each under a resource of its own (where no two
 * share a fence row). Both sides are the fenced store; the ratio is what sharing a resource costs.
 */
export async function oneLease(url: string, context: Record<string, unknown>): Promise<void> {
  const pool = new pg.Pool({ connectionString: url, max: ONE_LEASE_WRITERS });
  const { counted, meter } = countingPool(pool);
  try {
    const store = new FencedPostgres(counted, { schema: "bench_fenced" });
    const value = { note: "invoice total updated" };
    const impls: Record<Impl, Op> = {
      fenced: async (w) => {
        await store.put(`one-lease/${w}`, value, { fence: { resource: "one-lease", token: 1n, holder: HOLDER } });
      },
      plain: async (w) => {
        // A key that is not its resource's name: both sides take the fence-row path, and only sharing it differs.
        await store.put(`own-resource/${w}/record`, value, { fence: { resource: `own-resource/${w}`, token: 1n, holder: HOLDER } });
      },
    };
    await compare("postgres-one-lease", impls, meter, ONE_LEASE_WRITERS, { ...context, rows: "per-worker" });
  } finally {
    await pool.end();
  }
}
