// The store's own work per write, with the database taken out: FencedPostgres.put of the gateway
// bench's credential write (record cred/<w> under resource cred-writer/<w>, a holder, a 3-field
// value) through a pool whose client answers every statement at once with one row, against the same
// pool used by hand: check a client out, send one statement with the value as JSON, release it. What
// remains is what the store adds to a write in its caller's process — its checks, session, deadline,
// spans and write order — free of PostgreSQL's and the socket's time, which make the same comparison
// on a real server vary by more than the difference (docs/benchmarks.md). 64 writers at once, in this
// process, on the built packages; interleaved rounds, the median of each's ns per write and of their
// ratio in the same round.
// BENCH_BASE_STORE=<another build's packages/fenced-store/dist/postgres/index.js> adds that build's
// put as a third line, in the same rounds (a before/after of the store's own work).
import { FencedPostgres } from "@fenced/store/postgres";
import { answeringPool } from "./answering-pool.js";
import { emit, median, nsPerOp, overBase, round3 } from "./measure.js";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 9);
const WRITERS = 64;
/** Writes a round makes of each: long enough for a stable figure (about 0.2 s), short enough for pnpm bench. */
const WRITES = 40_000;

const pool = answeringPool();

type Put = (w: number, i: number) => Promise<unknown>;
const value = (w: number, i: number): Record<string, unknown> => ({ writer: w, seq: i, note: "invoice total updated" });
const fenced =
  (store: FencedPostgres): Put =>
  (w, i) =>
    store.put(`cred/${w}`, value(w, i), { fence: { resource: `cred-writer/${w}`, token: 1n, holder: `bench-${w}` } });
const byHand: Put = async (w, i) => {
  const c = await pool.connect();
  try {
    return await c.query({ text: "INSERT …", values: [`cred/${w}`, JSON.stringify(value(w, i))] });
  } finally {
    c.release();
  }
};

const impls: [string, Put, string][] = [
  ["put", fenced(new FencedPostgres(pool as never, { schema: "overhead" })), "FencedPostgres.put, this checkout's build"],
  ["by-hand", byHand, "the anchor: a checkout, one statement with the value as JSON, a release, through the same pool"],
];
const baseStore = process.env.BENCH_BASE_STORE;
if (baseStore !== undefined) {
  const base = (await import(baseStore)) as { FencedPostgres: typeof FencedPostgres };
  impls.push(["base-put", fenced(new base.FencedPostgres(pool as never, { schema: "overhead" })), `FencedPostgres.put of ${baseStore}`]);
}

/** Nanoseconds a write, `WRITES` writes by WRITERS writers at once. */
const nsPerWrite = (put: Put): Promise<number> => nsPerOp(put, WRITERS, WRITES);

for (const [, put] of impls) await nsPerWrite(put); // warm: JIT
const ns = new Map<string, number[]>(impls.map(([name]) => [name, []]));
for (let round = 0; round < ROUNDS; round++) {
  // Which runs first turns each round.
  const order = round % 2 === 0 ? impls : [...impls].reverse();
  for (const [name, put] of order) ns.get(name)?.push(await nsPerWrite(put));
}
const of = (name: string): number[] => ns.get(name) ?? [];
const anchor = of("by-hand");
for (const [name, , what] of impls) {
  if (name === "by-hand") continue;
  const own = of(name);
  emit({
    bench: "store-overhead",
    impl: name,
    what,
    writers: WRITERS,
    nsPerWrite: Math.round(median(own)),
    anchorNsPerWrite: Math.round(median(anchor)),
    anchorIs: impls[1]?.[2],
    ratio: round3(median(own.map((n, i) => n / (anchor[i] as number)))),
    ratioOf: "the median over rounds of this put's ns per write ÷ the anchor's in the same round",
    ...(name === "base-put" ? overBase(of("put"), own) : {}),
    rounds: ROUNDS,
  });
}
