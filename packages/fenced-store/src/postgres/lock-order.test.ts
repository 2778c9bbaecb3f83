import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResourceMismatchError, StaleTokenError } from "../errors.js";
import type { Fence } from "../fence.js";
import type { FencedPostgres } from "./store.js";
import { outcome, pgHarness, type PgHarness } from "./test-support.js";

/**
 * Writers whose sets of fences overlap, each giving its set in its own order — [a, b] and [b, a],
 * [b, c] and [c, a] — at once, many times over, with tokens from one counter (so that many arrive
 * stale): no deadlock (PostgreSQL's 40P01, or a call stuck until its deadline), every refusal a
 * StaleTokenError, and what was admitted for each resource admitted in increasing token order.
 * Locking the rows in the order given instead deadlocks here within a few rounds.
 */

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

/** Eight loops, two for each order: every pair of sets shares a resource, and [a, b] meets [b, a]. */
const SETS = [
  ["a", "b"],
  ["b", "a"],
  ["b", "c"],
  ["c", "a"],
  ["a", "b"],
  ["b", "a"],
  ["b", "c"],
  ["c", "a"],
] as const;
const ROUNDS = 40;

interface Tally {
  admitted: number;
  refused: number;
  /** Anything but an admission or a StaleTokenError: a deadlock, a timeout. */
  readonly others: unknown[];
}

/**
 * Runs the loops, each call under fences of one fresh token from a shared counter (one holder per
 * loop), and tallies the outcomes. `call` returns the call's promise.
 */
async function race(call: (fences: Fence[], loop: number) => Promise<unknown>): Promise<Tally> {
  let next = 0n;
  const tally: Tally = { admitted: 0, refused: 0, others: [] };
  await Promise.all(
    SETS.map(async (set, loop) => {
      for (let round = 0; round < ROUNDS; round++) {
        const token = ++next;
        const fences = set.map((resource) => ({ resource, token, holder: `loop-${loop}` }));
        const result = await outcome(call(fences, loop));
        if (result instanceof StaleTokenError) {
          tally.refused += 1;
          // Refused for a higher token admitted first (tokens are unique here, so never for an equal one).
          expect(result.highest).toBeGreaterThan(token);
          expect(set).toContain(result.resource);
        } else if (result instanceof Error) tally.others.push(result);
        else tally.admitted += 1;
      }
    }),
  );
  return tally;
}

/** Each resource's admitted tokens, in commit order (the log's ids), as the callback or the writes recorded them. */
async function admittedTokens(store: FencedPostgres, table: string): Promise<Map<string, bigint[]>> {
  const { rows } = await h.pool.query<{ resource: string; token: string }>(
    `SELECT resource, token::text FROM "${store.schema}".${table} ORDER BY id`,
  );
  const byResource = new Map<string, bigint[]>();
  for (const { resource, token } of rows) byResource.set(resource, [...(byResource.get(resource) ?? []), BigInt(token)]);
  return byResource;
}

function expectIncreasing(tokens: readonly bigint[]): void {
  for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1] as bigint);
}

describe("FencedPostgres: overlapping sets of fences in opposite orders", () => {
  it("transaction(): no deadlock; every stale call refused with StaleTokenError; each resource's writes in token order", async () => {
    const store = await h.store("order_tx");
    await h.pool.query(`CREATE TABLE "${store.schema}".log (id bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL)`);
    const started = performance.now();
    const tally = await race((fences) =>
      store.transaction(fences, async (client) => {
        // Hold the fence rows a moment, as real work would: the window in which a cycle could close.
        await client.query({ text: "SELECT pg_sleep(0.002)" });
        for (const { resource, token } of fences)
          await client.query({
            text: `INSERT INTO "${store.schema}".log (resource, token) VALUES ($1, $2)`,
            values: [resource, token.toString()],
          });
      }),
    );
    const ms = Math.round(performance.now() - started);
    console.info(`transaction(): ${SETS.length * ROUNDS} calls in ${ms} ms: ${tally.admitted} admitted, ${tally.refused} refused`);
    expect(tally.others).toEqual([]);
    expect(tally.admitted + tally.refused).toBe(SETS.length * ROUNDS);
    expect(tally.admitted).toBeGreaterThan(0);
    expect(tally.refused).toBeGreaterThan(0);
    const admitted = await admittedTokens(store, "log");
    for (const resource of ["a", "b", "c"]) {
      const tokens = admitted.get(resource) ?? [];
      expectIncreasing(tokens);
      // The ratchet holds the last token admitted for the resource, and the loop holding it.
      expect((await h.fenceRow(store, resource))?.token).toBe(tokens.at(-1));
    }
  });

  it("putAll(): no deadlock; every stale call refused, writing nothing; each key holds its resource's last admitted write", async () => {
    const store = await h.store("order_put_all");
    // Every write, admitted or not, is recorded where it lands: a trigger on the store's table logs what commits.
    await h.pool.query(`CREATE TABLE "${store.schema}".log (id bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL)`);
    await h.pool.query(`CREATE FUNCTION "${store.schema}".log_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO "${store.schema}".log (resource, token) VALUES (NEW.resource, NEW.token);
  RETURN NEW;
END $$`);
    await h.pool.query(
      `CREATE TRIGGER log_write AFTER INSERT OR UPDATE ON "${store.schema}".records FOR EACH ROW EXECUTE FUNCTION "${store.schema}".log_write()`,
    );
    const started = performance.now();
    const tally = await race((fences, loop) =>
      // Each write names its resource; the writes are given in the set's order, and a second key per resource makes the key order matter too.
      store.putAll(
        fences.flatMap(({ resource, token }) => [
          { key: `${resource}/x`, value: { token: token.toString(), loop }, resource },
          { key: `${resource}/y`, value: { token: token.toString(), loop }, resource },
        ]),
        { fences },
      ),
    );
    const ms = Math.round(performance.now() - started);
    console.info(`putAll(): ${SETS.length * ROUNDS} calls in ${ms} ms: ${tally.admitted} admitted, ${tally.refused} refused`);
    expect(tally.others).toEqual([]);
    expect(tally.admitted + tally.refused).toBe(SETS.length * ROUNDS);
    expect(tally.admitted).toBeGreaterThan(0);
    expect(tally.refused).toBeGreaterThan(0);
    const written = await admittedTokens(store, "log");
    for (const resource of ["a", "b", "c"]) {
      // Two records per admitted call, none per refused one: each token twice, in increasing order.
      const tokens = written.get(resource) ?? [];
      expectIncreasing(tokens.filter((_, i) => i % 2 === 0));
      expect(tokens.filter((_, i) => i % 2 === 1)).toEqual(tokens.filter((_, i) => i % 2 === 0));
      const last = (await h.fenceRow(store, resource))?.token;
      expect(tokens.at(-1)).toBe(last);
      for (const key of [`${resource}/x`, `${resource}/y`])
        expect(await store.get(key)).toMatchObject({ value: { token: String(last) }, token: last, resource });
    }
  });

  it("putAll() of new keys in opposite orders under unrelated fences: one owner per key, the other refused, no deadlock", async () => {
    const store = await h.store("order_keys");
    // Two resources that share no fence row: only the records' order stands between their inserts.
    const p = { resource: "p", token: 1n, holder: "hp" };
    const q = { resource: "q", token: 1n, holder: "hq" };
    let owners = { p: 0, q: 0 };
    const others: unknown[] = [];
    const started = performance.now();
    for (let round = 0; round < ROUNDS; round++) {
      const keys = Array.from({ length: 8 }, (_, i) => [`r${round}/${i}/1`, `r${round}/${i}/2`] as const);
      const results = await Promise.all(
        keys.flatMap(([k1, k2]) => [
          outcome(
            store.putAll(
              [
                { key: k1, value: "p" },
                { key: k2, value: "p" },
              ],
              { fences: [p] },
            ),
          ),
          outcome(
            store.putAll(
              [
                { key: k2, value: "q" },
                { key: k1, value: "q" },
              ],
              { fences: [q] },
            ),
          ),
        ]),
      );
      for (const [i, [k1, k2]] of keys.entries()) {
        const [byP, byQ] = [results[2 * i], results[2 * i + 1]];
        for (const r of [byP, byQ]) if (r instanceof Error && !(r instanceof ResourceMismatchError)) others.push(r);
        // Exactly one of the two wrote both keys; the other was refused on the first key it reached.
        const winner = (await store.get(k1))?.value as "p" | "q";
        expect((await store.get(k2))?.value).toBe(winner);
        expect(winner === "p" ? byQ : byP).toBeInstanceOf(ResourceMismatchError);
        owners = { ...owners, [winner]: owners[winner] + 1 };
      }
    }
    const ms = Math.round(performance.now() - started);
    console.info(`putAll() of new keys: ${ROUNDS * 8} pairs in ${ms} ms: p won ${owners.p}, q won ${owners.q}`);
    expect(others).toEqual([]);
  });
});
