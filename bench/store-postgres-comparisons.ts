// The comparisons of store-postgres.bench.ts: what each side is, and each line's goal.

/** Concurrent writers of the one-lease comparison (each with a connection of its own). */
export const ONE_LEASE_WRITERS = 32;
/** Records per putAll() in the postgres-put-all comparison. */
export const PUT_ALL_RECORDS = 16;
/** What a Lease from @fenced/lock presents as its holder. */
export const HOLDER = "5f0c1e8a9b7d4c3e2f1a0b9c8d7e6f5a";
/** The scale comparison's tables, and how far its ratio may be from the one on empty tables. */
export const SCALE = { keys: 1_000_000, resources: 100_000 } as const;
export const SCALE_GOAL = 0.05;
/** The own-key lines' WAL goal: the fenced side's WAL bytes per write ÷ the plain side's. */
export const OWN_WAL_GOAL = 1.1;

/** The plain tables' statements: the unconditional upsert, and the compare-and-set. */
export const PLAIN_SQL = {
  upsert: "INSERT INTO bench_plain (key, value) VALUES ($1, $2::jsonb) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
  cas: "INSERT INTO bench_plain_v (key, value, version) VALUES ($1, $2::jsonb, 1) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = bench_plain_v.version + 1 WHERE bench_plain_v.version = $3 RETURNING version",
} as const;

/** The value worker `w` writes at its operation `i`, either side. */
export const value = (w: number, i: number): { writer: number; seq: number; note: string } => ({
  writer: w,
  seq: i,
  note: "invoice total updated",
});

export type Impl = "fenced" | "plain";
export type Bench =
  | "postgres-put"
  | "postgres-put-own"
  | "postgres-recipe"
  | "postgres-recipe-own"
  | "postgres-put-all"
  | "postgres-sync-floor"
  | "postgres-one-lease"
  | "postgres-scale";

/** A ratio's goal: one for every concurrency, one per concurrency, or none (for information). */
export type Goal = number | null | Readonly<Record<number, number>>;

/** The goal at `concurrency`: null for none, or for a concurrency a per-concurrency goal does not name. */
export function goalAt(goal: Goal, concurrency: number): number | null {
  if (goal === null || typeof goal === "number") return goal;
  return goal[concurrency] ?? null;
}

/** A write whose key is its fence's resource: ≤ 1.05 alone, ≤ 1.10 with 16 writers. */
const OWN_GOAL = { 1: 1.05, 16: 1.1 } as const;

const upsert = "single statement INSERT … ON CONFLICT DO UPDATE, autocommit, prepared";
const cas = "single statement compare-and-set INSERT … ON CONFLICT DO UPDATE … WHERE version = $3 RETURNING version, autocommit, prepared";

export const COMPARISONS: Record<Bench, { goal: Goal; sides: Record<Impl, string>; fenced: string; plain: string }> = {
  "postgres-put": {
    goal: 1.15,
    sides: { fenced: "fenced", plain: "plain" },
    fenced:
      "FencedPostgres.put without ifVersion, key row/w under resource writer/w (not its own): ratchet (token, holder) and owner-checked upsert in one statement",
    plain: upsert,
  },
  "postgres-put-own": {
    goal: OWN_GOAL,
    sides: { fenced: "fenced", plain: "plain" },
    fenced: "FencedPostgres.put without ifVersion, the key its fence's resource, at the fence the resource holds (the one-row path)",
    plain: upsert,
  },
  "postgres-recipe": {
    goal: 1.3,
    sides: { fenced: "fenced", plain: "plain" },
    fenced:
      "register() once per lease, then FencedPostgres.put with ifVersion (the version the previous put returned), key recipe/c/w/record under resource recipe/c/w (not its own)",
    plain: cas,
  },
  "postgres-recipe-own": {
    goal: OWN_GOAL,
    sides: { fenced: "fenced", plain: "plain" },
    fenced:
      "register() once per lease, then FencedPostgres.put with ifVersion (the version the previous put returned), the key its fence's resource (the one-row path)",
    plain: cas,
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
