// The lines of store-postgres.bench.ts that set a key under a resource of its own name against one
// under another: postgres-put-own, and postgres-recipe beside postgres-recipe-own. A write whose key
// is its fence's resource, at the fence that resource holds, may take the one-row path (one UPDATE of
// the record row, no fence row locked); any other key locks the fence row FOR SHARE first.
import type { FencedPostgres } from "@fenced/store/postgres";
import { emit, type Op } from "./measure.js";
import { compare, round, type Compared, type Counted, type Meter } from "./store-postgres-compare.js";
import { HOLDER, OWN_WAL_GOAL, PLAIN_SQL, value, type Impl } from "./store-postgres-comparisons.js";

/** What each line needs: the store, the counted pool, the meter, and the server's context for its lines. */
export interface Setup {
  readonly store: FencedPostgres;
  readonly counted: Counted;
  readonly meter: Meter;
  readonly context: Record<string, unknown>;
}

/** The own-key lines' second goal: the fenced side's WAL per write ÷ the plain side's. */
function walGoalLine(bench: string, concurrency: number, context: Record<string, unknown>, compared: Compared): void {
  const { fenced, plain } = compared.walBytesPerOp;
  const ratio = round(fenced / plain);
  emit({
    bench: `${bench}-wal`,
    ...context,
    concurrency,
    ratio,
    ratioOf: `fenced WAL bytes per write ÷ plain WAL bytes per write (${bench}, median of the slices each)`,
    goal: OWN_WAL_GOAL,
    met: ratio <= OWN_WAL_GOAL,
    walBytesPerOp: { fenced, plain },
  });
}

/**
 * postgres-put-own: each worker puts a key that is its fence's resource, registered at that fence
 * and written once before the slices, so that every measured put finds the resource at its fence.
 * The plain side is postgres-put's.
 */
export async function putOwn({ store, counted, meter, context }: Setup): Promise<void> {
  for (const concurrency of [1, 16]) {
    const key = (w: number): string => `own/${concurrency}/${w}`;
    const fence = (w: number) => ({ resource: key(w), token: 1n, holder: HOLDER });
    for (let w = 0; w < concurrency; w++) {
      await store.register(fence(w));
      await store.put(key(w), value(w, 0), { fence: fence(w) });
    }
    const impls: Record<Impl, Op> = {
      fenced: async (w, i) => {
        await store.put(key(w), value(w, i), { fence: fence(w) });
      },
      plain: async (w, i) => {
        await counted.query({ name: "bench.plain", text: PLAIN_SQL.upsert, values: [`row/${w}`, JSON.stringify(value(w, i))] });
      },
    };
    const compared = await compare("postgres-put-own", impls, meter, concurrency, { ...context, rows: "per-worker" });
    walGoalLine("postgres-put-own", concurrency, context, compared);
  }
}

/**
 * The safe recipe: each worker is one lease on a resource of its own. It registers once
 * (fence-on-acquire), then every put names the version its previous put returned; a refusal would
 * throw and end the run. With `own`, the key is the resource (postgres-recipe-own); without, the key
 * is `<resource>/record` (postgres-recipe, the fence-row path).
 */
export async function recipe({ store, counted, meter, context }: Setup, own: boolean): Promise<void> {
  const bench = own ? "postgres-recipe-own" : "postgres-recipe";
  for (const concurrency of [1, 16]) {
    const versions = new Map<number, string>();
    const plainVersions = new Map<number, string>();
    const resource = (w: number): string => `${own ? "recipe-own" : "recipe"}/${concurrency}/${w}`;
    const key = (w: number): string => (own ? resource(w) : `${resource(w)}/record`);
    const fence = (w: number) => ({ resource: resource(w), token: 1n, holder: HOLDER });
    for (let w = 0; w < concurrency; w++) {
      await store.register(fence(w));
      versions.set(w, (await store.put(key(w), value(w, 0), { fence: fence(w) })).version);
      const { rows } = await counted.query<{ version: string }>({
        text: PLAIN_SQL.cas,
        values: [key(w), JSON.stringify(value(w, 0)), "0"],
      });
      plainVersions.set(w, rows[0]?.version ?? "missing");
    }
    const impls: Record<Impl, Op> = {
      fenced: async (w, i) => {
        const r = await store.put(key(w), value(w, i), { fence: fence(w), ifVersion: versions.get(w) });
        versions.set(w, r.version);
      },
      plain: async (w, i) => {
        const { rows } = await counted.query<{ version: string }>({
          name: "bench.plain_cas",
          text: PLAIN_SQL.cas,
          values: [key(w), JSON.stringify(value(w, i)), plainVersions.get(w) ?? "missing"],
        });
        const written = rows[0]?.version;
        if (written === undefined)
          throw new Error(`the plain compare-and-set of ${key(w)} was refused: the benchmark lost track of its version`);
        plainVersions.set(w, written);
      },
    };
    const compared = await compare(bench, impls, meter, concurrency, { ...context, rows: "per-worker" });
    if (own) walGoalLine(bench, concurrency, context, compared);
  }
}
