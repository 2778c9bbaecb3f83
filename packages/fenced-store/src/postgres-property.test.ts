import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError, VersionMismatchError } from "./errors.js";
import type { FencedPostgres } from "./postgres.js";
import { pgHarness, sleep, type PgHarness } from "./postgres-test-support.js";

let h: PgHarness;
let store: FencedPostgres;
beforeAll(async () => {
  h = await pgHarness();
  store = await h.store("property");
  // An independent history, written by the database itself inside each writing transaction.
  // Every writer of a resource holds that resource's fence row lock from its ratchet to its COMMIT,
  // so `seq` (drawn under the lock) orders the committed writes of one resource in commit order.
  // Rolled-back transactions take their history rows with them: only committed effects are logged.
  await h.pool.query(`
    CREATE TABLE "${store.schema}".history (seq bigserial PRIMARY KEY, tbl text, op text, resource text, key text, token bigint, writer text);
    CREATE FUNCTION "${store.schema}".log_fence() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO "${store.schema}".history (tbl, op, resource, token) VALUES ('fence', TG_OP, NEW.resource, NEW.token);
      RETURN NULL;
    END $$;
    CREATE FUNCTION "${store.schema}".log_record() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'DELETE' THEN
        INSERT INTO "${store.schema}".history (tbl, op, resource, key, token) VALUES ('records', TG_OP, OLD.resource, OLD.key, NULL);
      ELSE
        INSERT INTO "${store.schema}".history (tbl, op, resource, key, token, writer) VALUES ('records', TG_OP, NEW.resource, NEW.key, NEW.token, NEW.value->>'writer');
      END IF;
      RETURN NULL;
    END $$;
    CREATE TRIGGER log AFTER INSERT OR UPDATE ON "${store.schema}".fence FOR EACH ROW EXECUTE FUNCTION "${store.schema}".log_fence();
    CREATE TRIGGER log AFTER INSERT OR UPDATE OR DELETE ON "${store.schema}".records FOR EACH ROW EXECUTE FUNCTION "${store.schema}".log_record();
  `);
});
afterAll(async () => {
  await h.close();
});

type Kind = "put" | "putIfVersion" | "delete" | "register";
interface Op {
  readonly kind: Kind;
  readonly token: bigint;
  readonly key: "a" | "b";
  readonly delayMs: number;
}
type Outcome = { ok: true; deleted?: boolean } | { ok: false; stale: StaleTokenError } | { ok: false; mismatch: VersionMismatchError };

const opArb: fc.Arbitrary<Op> = fc.record({
  kind: fc.constantFrom<Kind>("put", "put", "put", "putIfVersion", "putIfVersion", "delete", "register"),
  // A small range, so equal tokens (the same holder writing twice) and reorderings are both common.
  token: fc.bigInt({ min: 1n, max: 12n }),
  key: fc.constantFrom("a" as const, "b" as const),
  delayMs: fc.integer({ min: 0, max: 4 }),
});

let run = 0;

async function execute(op: Op, resource: string, keyPrefix: string, writer: string): Promise<Outcome> {
  await sleep(op.delayMs);
  const fence = { resource, token: op.token };
  const key = `${keyPrefix}/${op.key}`;
  try {
    switch (op.kind) {
      case "register":
        await store.register(fence);
        return { ok: true };
      case "delete":
        return { ok: true, deleted: await store.delete(key, { fence }) };
      case "put":
        await store.put(key, { writer }, { fence });
        return { ok: true };
      case "putIfVersion": {
        const read = await store.get(key);
        await store.put(key, { writer }, read === undefined ? { fence } : { fence, ifVersion: read.version });
        return { ok: true };
      }
    }
  } catch (err) {
    if (err instanceof StaleTokenError) return { ok: false, stale: err };
    if (err instanceof VersionMismatchError) return { ok: false, mismatch: err };
    throw err;
  }
}

interface Logged {
  seq: string;
  tbl: "fence" | "records";
  op: string;
  key: string | null;
  token: string | null;
  writer: string | null;
}

describe("FencedPostgres: concurrent writers with random tokens (property)", () => {
  it("accepted tokens never decrease in commit order, the final state is the last accepted write, refused writes change nothing", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 2, maxLength: 24 }), async (ops) => {
        run += 1;
        const resource = `res-${run}`;
        const prefix = `run-${run}`;
        // All writers start at once; only their small random delays and the server decide the interleaving.
        const outcomes = await Promise.all(ops.map((op, i) => execute(op, resource, prefix, `w${i}`)));

        const { rows: log } = await h.pool.query<Logged>(
          `SELECT seq, tbl, op, key, token, writer FROM "${store.schema}".history WHERE resource = $1 ORDER BY seq`,
          [resource],
        );
        const accepted = ops.filter((_, i) => outcomes[i]?.ok === true);

        // 1. The ratchet's own history: tokens never go down in commit order.
        const fenceTokens = log.filter((e) => e.tbl === "fence").map((e) => BigInt(e.token ?? -1));
        for (let i = 1; i < fenceTokens.length; i++) expect(fenceTokens[i]).toBeGreaterThanOrEqual(fenceTokens[i - 1] ?? 0n);
        // Every accepted operation raised (or re-affirmed) the ratchet exactly once; refused ones never did.
        expect(fenceTokens.map(String).sort()).toEqual(accepted.map((op) => String(op.token)).sort());
        // Record writes happen under the token in force, so they never go down either.
        const writeTokens = log.filter((e) => e.tbl === "records" && e.token !== null).map((e) => BigInt(e.token ?? -1));
        for (let i = 1; i < writeTokens.length; i++) expect(writeTokens[i]).toBeGreaterThanOrEqual(writeTokens[i - 1] ?? 0n);

        // 2. Acknowledged writes are in the history exactly once; refused ones are not there at all.
        const writers = log.filter((e) => e.tbl === "records" && e.writer !== null).map((e) => e.writer);
        ops.forEach((op, i) => {
          const outcome = outcomes[i];
          const isWrite = op.kind === "put" || op.kind === "putIfVersion";
          if (isWrite) expect(writers.filter((w) => w === `w${i}`).length).toBe(outcome?.ok === true ? 1 : 0);
          if (outcome !== undefined && !outcome.ok && "stale" in outcome) {
            expect(outcome.stale.highest).toBeGreaterThan(op.token);
            expect(outcome.stale.token).toBe(op.token);
          }
        });
        const deletions = log.filter((e) => e.tbl === "records" && e.op === "DELETE").length;
        expect(deletions).toBe(outcomes.filter((o) => o.ok && o.deleted === true).length);

        // 3. The newest token is never refused as stale.
        const maxToken = ops.reduce((m, op) => (op.token > m ? op.token : m), 0n);
        ops.forEach((op, i) => {
          const outcome = outcomes[i];
          if (op.token === maxToken) expect(outcome !== undefined && !outcome.ok && "stale" in outcome).toBe(false);
        });
        expect(await h.fenceToken(store, resource)).toBe(accepted.length === 0 ? undefined : accepted.reduce((m, op) => (op.token > m ? op.token : m), 0n));

        // 4. The final state is the last committed write of each key (replaying the history), i.e. the
        //    last accepted write in commit order; it carries that write's token.
        for (const key of ["a", "b"] as const) {
          const last = log.filter((e) => e.tbl === "records" && e.key === `${prefix}/${key}`).at(-1);
          const stored = await store.get<{ writer: string }>(`${prefix}/${key}`);
          if (last === undefined || last.op === "DELETE") {
            expect(stored).toBeUndefined();
          } else {
            expect(stored?.value.writer).toBe(last.writer);
            expect(stored?.token).toBe(BigInt(last.token ?? -1));
            expect(stored?.resource).toBe(resource);
          }
        }
      }),
      { numRuns: 100 },
    );
  });
});
