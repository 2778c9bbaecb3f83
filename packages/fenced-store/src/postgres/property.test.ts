import { admits } from "@fenced/fence";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResourceMismatchError, StaleTokenError, VersionMismatchError } from "../errors.js";
import type { FencedPostgres } from "./store.js";
import { pgHarness, sleep, type PgHarness } from "./test-support.js";

let h: PgHarness;
let store: FencedPostgres;
beforeAll(async () => {
  h = await pgHarness();
  store = await h.store("property");
  // An independent history, written by the database itself inside each writing transaction.
  // Every raise of a resource holds its fence lock exclusively (and its fence row) from its ratchet to
  // its COMMIT, and every write at the fence the row already holds holds the fence lock shared to its
  // commit (fence-lock.ts): so `seq` (drawn under the lock) orders a resource's raises in commit order,
  // and places every write between the raises before and after it. Rolled-back transactions take
  // their history rows with them: only committed effects are logged.
  await h.pool.query(`
    CREATE TABLE "${store.schema}".history (seq bigserial PRIMARY KEY, tbl text, op text, resource text, key text, token bigint, holder text, writer text, tombstone boolean);
    CREATE FUNCTION "${store.schema}".log_fence() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO "${store.schema}".history (tbl, op, resource, token, holder) VALUES ('fence', TG_OP, NEW.resource, NEW.token, NEW.holder);
      RETURN NULL;
    END $$;
    CREATE FUNCTION "${store.schema}".log_record() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'DELETE' THEN
        INSERT INTO "${store.schema}".history (tbl, op, resource, key) VALUES ('records', TG_OP, OLD.resource, OLD.key);
      ELSE
        -- A change of owner is a transfer: logged as such, so that the value it carries is not taken for a new write.
        INSERT INTO "${store.schema}".history (tbl, op, resource, key, token, holder, writer, tombstone)
        VALUES ('records', CASE WHEN TG_OP = 'UPDATE' AND OLD.resource <> NEW.resource THEN 'TRANSFER' ELSE TG_OP END,
          NEW.resource, NEW.key, NEW.token, NEW.holder, NEW.value->>'writer', NEW.value IS NULL);
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

type Kind = "put" | "putIfVersion" | "delete" | "register" | "transfer";
type Name = "A" | "B";
interface Op {
  readonly kind: Kind;
  readonly token: bigint;
  /** Two leases may hold one token (a lock that lost its counters): the holder tells them apart. */
  readonly holder: "h1" | "h2" | undefined;
  /** Two resources name the same keys: whichever creates a key owns it. */
  readonly resource: Name;
  readonly key: "a" | "b";
  readonly delayMs: number;
  /** transfer: the fence of the other resource, which receives the key. */
  readonly toToken: bigint;
  readonly toHolder: "h1" | "h2" | undefined;
}
const other = (name: Name): Name => (name === "A" ? "B" : "A");
/** The fences an operation presents: a transfer presents its own resource's (from) and the other's (to). */
const presented = (op: Op): { name: Name; token: bigint; holder: string | null }[] => [
  { name: op.resource, token: op.token, holder: op.holder ?? null },
  ...(op.kind === "transfer" ? [{ name: other(op.resource), token: op.toToken, holder: op.toHolder ?? null }] : []),
];
type Outcome =
  | { ok: true; deleted?: true; moved?: boolean }
  | { ok: false; stale: StaleTokenError }
  | { ok: false; mismatch: VersionMismatchError }
  | { ok: false; foreign: ResourceMismatchError };

const fields = {
  kind: fc.constantFrom<Kind>("put", "put", "put", "putIfVersion", "putIfVersion", "delete", "register"),
  // A small range, so equal tokens (the same holder writing twice, or two holders) and reorderings are all common.
  token: fc.bigInt({ min: 1n, max: 12n }),
  holder: fc.constantFrom("h1" as const, "h1" as const, "h2" as const, undefined),
  resource: fc.constantFrom("A" as const, "A" as const, "A" as const, "B" as const),
  key: fc.constantFrom("a" as const, "b" as const),
  delayMs: fc.integer({ min: 0, max: 4 }),
  toToken: fc.bigInt({ min: 1n, max: 12n }),
  toHolder: fc.constantFrom("h1" as const, "h2" as const, undefined),
};
// A transfer needs the key to exist and its from fence to be the owner's highest: it presents a high token, a little later.
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: fc.record(fields), weight: 4 },
  {
    arbitrary: fc.record({
      ...fields,
      kind: fc.constant<Kind>("transfer"),
      token: fc.bigInt({ min: 9n, max: 12n }),
      delayMs: fc.integer({ min: 2, max: 6 }),
    }),
    weight: 1,
  },
);

let run = 0;

async function execute(op: Op, resources: Record<Name, string>, keyPrefix: string, writer: string): Promise<Outcome> {
  await sleep(op.delayMs);
  const fence = { resource: resources[op.resource], token: op.token, holder: op.holder };
  const key = `${keyPrefix}/${op.key}`;
  try {
    switch (op.kind) {
      case "register":
        await store.register(fence);
        return { ok: true };
      case "transfer": {
        const to = { resource: resources[other(op.resource)], token: op.toToken, holder: op.toHolder };
        return { ok: true, moved: (await store.transfer(key, { from: fence, to })) !== undefined };
      }
      case "delete":
        await store.delete(key, { fence });
        return { ok: true, deleted: true };
      case "put":
        await store.put(key, { writer }, { fence });
        return { ok: true };
      case "putIfVersion": {
        const read = await store.get(key);
        await store.put(key, { writer }, { fence, ifVersion: read?.version });
        return { ok: true };
      }
    }
  } catch (err) {
    if (err instanceof StaleTokenError) return { ok: false, stale: err };
    if (err instanceof VersionMismatchError) return { ok: false, mismatch: err };
    if (err instanceof ResourceMismatchError) return { ok: false, foreign: err };
    throw err;
  }
}

interface Logged {
  seq: string;
  tbl: "fence" | "records";
  op: string;
  resource: string;
  key: string | null;
  token: string | null;
  holder: string | null;
  writer: string | null;
  tombstone: boolean | null;
}

const fenceOf = (e: { token: string | bigint | null; holder: string | null }) => ({ token: BigInt(e.token ?? -1), holder: e.holder });

describe("FencedPostgres: concurrent writers with random tokens, holders and resources (property)", () => {
  it("admitted fences follow admits() in commit order, a key changes owner only by transfer, the final state is the last accepted write, refused writes change nothing", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 2, maxLength: 24 }), async (ops) => {
        run += 1;
        const resources = { A: `res-${run}-A`, B: `res-${run}-B` };
        const prefix = `run-${run}`;
        // All writers start at once; only their small random delays and the server decide the interleaving.
        const outcomes = await Promise.all(ops.map((op, i) => execute(op, resources, prefix, `w${i}`)));

        const { rows: log } = await h.pool.query<Logged>(
          `SELECT seq, tbl, op, resource, key, token::text, holder, writer, tombstone FROM "${store.schema}".history WHERE resource = ANY($1) OR key LIKE $2 ORDER BY seq`,
          [Object.values(resources), `${prefix}/%`],
        );

        // Every fence each operation presented, with the operation's outcome. A transfer of a key never
        // written resolves undefined and rolls its ratchet raises back: it admitted nothing.
        const fences = ops.flatMap((op, i) => presented(op).map((fence) => ({ op, fence, outcome: outcomes[i] })));
        const admitted = (x: (typeof fences)[number]) => x.outcome?.ok === true && x.outcome.moved !== false;

        for (const name of ["A", "B"] as const) {
          const resource = resources[name];
          const mine = fences.filter((x) => x.fence.name === name);
          // 1. The ratchet's own history: each admitted fence is admitted by the one before it, in commit order.
          const ratchet = log.filter((e) => e.tbl === "fence" && e.resource === resource).map(fenceOf);
          for (let i = 1; i < ratchet.length; i++) {
            const [prev, cur] = [ratchet[i - 1], ratchet[i]];
            if (prev === undefined || cur === undefined) throw new Error("index");
            expect(admits(prev, { resource, ...cur }), `${resource}: ${prev.token}/${prev.holder} then ${cur.token}/${cur.holder}`).toBe(
              true,
            );
          }
          // Every raise is an accepted operation's (at most once each; refused ones never raised), and every
          // accepted operation's fence was the ratchet's at some point: raised by it, or before it (a write
          // at the fence the row already held rewrites nothing).
          const key = (f: { token: bigint; holder: string | null }) => `${f.token}/${f.holder ?? "-"}`;
          const accepted = mine.filter(admitted).map((x) => key(x.fence));
          const unused = [...accepted];
          for (const raised of ratchet.map(key)) {
            const at = unused.indexOf(raised);
            expect(at, `${resource}: raised ${raised}, which no accepted operation presented`).toBeGreaterThanOrEqual(0);
            unused.splice(at, 1);
          }
          for (const fence of accepted) expect(ratchet.map(key), `${resource}: ${fence} accepted`).toContain(fence);
          // Every record written under the resource (a transfer's under its to-fence) was written at the
          // fence the ratchet held at that moment: the last raise of the resource logged before it.
          let current: { token: bigint; holder: string | null } | undefined;
          for (const e of log.filter((x) => x.resource === resource)) {
            if (e.tbl === "fence") current = fenceOf(e);
            else expect(fenceOf(e), `${resource}: record ${e.key} written by ${e.writer}`).toEqual(current);
          }
          // The stored row is the last admitted fence.
          expect(await h.fenceRow(store, resource)).toEqual(ratchet.at(-1));

          // 2. Refusals say why, truthfully: a stale refusal names a fence the operation presented, one its resource's highest does not admit.
          for (const { fence, outcome } of mine) {
            if (outcome === undefined || outcome.ok || !("stale" in outcome) || outcome.stale.resource !== resource) continue;
            expect(outcome.stale.token).toBe(fence.token);
            const highest = { token: outcome.stale.highest, holder: outcome.stale.highestHolder ?? null };
            expect(admits(highest, { resource, token: fence.token, holder: fence.holder })).toBe(false);
          }
          // 3. A token that no other holder shares, and that is the resource's highest, is never refused as stale.
          const max = mine.reduce((m, x) => (x.fence.token > m ? x.fence.token : m), 0n);
          const holdersAtMax = new Set(mine.filter((x) => x.fence.token === max).map((x) => x.fence.holder));
          if (holdersAtMax.size === 1) {
            for (const { fence, outcome } of mine)
              if (fence.token === max)
                expect(outcome !== undefined && !outcome.ok && "stale" in outcome && outcome.stale.resource === resource).toBe(false);
          }
        }
        ops.forEach((op, i) => {
          const outcome = outcomes[i];
          if (outcome === undefined || outcome.ok) return;
          if ("stale" in outcome) expect(presented(op).map((f) => resources[f.name])).toContain(outcome.stale.resource);
          if ("foreign" in outcome)
            expect(outcome.foreign).toMatchObject({ resource: resources[op.resource], owner: resources[other(op.resource)] });
        });

        // 4. Acknowledged writes are in the history exactly once, under their own fence; refused ones not at all.
        // (A transfer carries the value, and its writer's name with it: it is logged as TRANSFER.)
        const records = log.filter((e) => e.tbl === "records");
        const writes = records.filter((e) => e.op !== "TRANSFER");
        ops.forEach((op, i) => {
          const outcome = outcomes[i];
          const isWrite = op.kind === "put" || op.kind === "putIfVersion";
          const entries = writes.filter((e) => e.writer === `w${i}`);
          if (isWrite) expect(entries.length).toBe(outcome?.ok === true ? 1 : 0);
          for (const e of entries)
            expect({ resource: e.resource, ...fenceOf(e) }).toEqual({
              resource: resources[op.resource],
              token: op.token,
              holder: op.holder ?? null,
            });
        });
        expect(records.filter((e) => e.op === "DELETE")).toEqual([]); // deletes leave tombstones
        // Every accepted delete wrote one tombstone (over a record, over a tombstone, or as the key's first row).
        expect(writes.filter((e) => e.tombstone === true).length).toBe(outcomes.filter((o) => o.ok && o.deleted === true).length);

        for (const name of ["a", "b"] as const) {
          const key = `${prefix}/${name}`;
          const history = records.filter((e) => e.key === key);
          // 5. A key changes owner only by a transfer: one TRANSFER entry per transfer that moved it, under the to-fence,
          // and every other write of the key names the owner of the moment.
          const moves = ops.filter(
            (op, i) => op.kind === "transfer" && op.key === name && outcomes[i]?.ok === true && outcomes[i]?.moved === true,
          );
          expect(history.filter((e) => e.op === "TRANSFER").length).toBe(moves.length);
          for (let i = 1; i < history.length; i++) {
            const [prev, cur] = [history[i - 1], history[i]];
            if (prev === undefined || cur === undefined) throw new Error("index");
            if (cur.op === "TRANSFER") {
              expect(cur.resource).not.toBe(prev.resource);
              const to = { resource: cur.resource, ...fenceOf(cur) };
              expect(
                moves.some(
                  (op) => resources[other(op.resource)] === to.resource && op.toToken === to.token && (op.toHolder ?? null) === to.holder,
                ),
              ).toBe(true);
            } else expect(cur.resource).toBe(prev.resource);
          }
          // 6. The final state is the last committed write of the key (replaying the history).
          const last = history.at(-1);
          const stored = await store.get<{ writer: string }>(key);
          if (last === undefined || last.tombstone === true) {
            expect(stored).toBeUndefined();
          } else {
            expect(stored?.value.writer).toBe(last.writer);
            expect({ resource: stored?.resource, token: stored?.token, holder: stored?.holder }).toEqual({
              resource: last.resource,
              ...fenceOf(last),
            });
          }
        }
      }),
      { numRuns: 100 },
    );
  });
});
