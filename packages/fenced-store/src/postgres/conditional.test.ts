import { waitFor } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError, VersionMismatchError } from "../errors.js";
import type { Fence } from "../fence.js";
import { FencedPostgres } from "./store.js";
import type { PgQueryConfig } from "./types.js";
import { fenceAt as f, outcome, pgHarness, type PgHarness, stillPending } from "./test-support.js";

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

/**
 * The pool, with every statement and every checked-out connection counted: what a round trip costs.
 * Every call checks one client out (as pool.query() does inside), so that it can bound the wait and
 * listen for the client's errors; a checkout of an idle client costs no round trip.
 */
function countingPool() {
  const sent: string[] = [];
  let connects = 0;
  const pool = {
    query: (config: PgQueryConfig) => {
      sent.push(config.text);
      return h.pool.query(config);
    },
    connect: async () => {
      connects += 1;
      const client = await h.pool.connect();
      return {
        query: (config: PgQueryConfig) => {
          sent.push(config.text);
          return client.query(config);
        },
        release: (err?: Error | boolean) => client.release(err),
      };
    },
  };
  return {
    pool,
    /** Statements sent and connections checked out since the last call. */
    take() {
      const taken = {
        statements: sent.length,
        connects,
        transactionControl: sent.filter((t) => /^(BEGIN|COMMIT|ROLLBACK)\b/.test(t)).length,
      };
      sent.length = 0;
      connects = 0;
      return taken;
    },
  };
}

describe("FencedPostgres: a conditional write (ifVersion) is one statement", () => {
  it("put and delete with ifVersion send one statement, with no transaction of their own, written or refused for owner or version", async () => {
    const counting = countingPool();
    const seed = await h.store("one_trip");
    const store = new FencedPostgres(counting.pool, { schema: seed.schema });
    const v1 = await store.put("k", 1, { fence: f("r", 1n, "h") });
    // The first write of a fence: the shared statement finds the row at another fence (none), then the raise.
    expect(counting.take()).toEqual({ statements: 2, connects: 1, transactionControl: 0 });

    const v2 = await store.put("k", 2, { fence: f("r", 1n, "h"), ifVersion: v1.version });
    expect(counting.take(), "ifVersion put, written").toEqual({ statements: 1, connects: 1, transactionControl: 0 });

    await expect(store.put("k", 3, { fence: f("r", 1n, "h"), ifVersion: v1.version })).rejects.toMatchObject({
      name: "VersionMismatchError",
      actual: v2.version,
    });
    expect(counting.take(), "ifVersion put, version refused").toEqual({ statements: 1, connects: 1, transactionControl: 0 });

    await expect(store.put("k", 3, { fence: f("s", 1n), ifVersion: v2.version })).rejects.toMatchObject({
      name: "ResourceMismatchError",
      owner: "r",
    });
    // "s" has no fence row yet: the shared statement finds none, the raise is refused for the owner (and undone).
    expect(counting.take(), "ifVersion put, owner refused").toEqual({ statements: 2, connects: 1, transactionControl: 0 });

    // A stale fence: the shared statement, the raise (refused), and the highest token read for its error.
    await expect(store.put("k", 3, { fence: f("r", 0n, "h"), ifVersion: v2.version })).rejects.toBeInstanceOf(StaleTokenError);
    expect(counting.take(), "ifVersion put, stale").toEqual({ statements: 3, connects: 1, transactionControl: 0 });

    const deleted = await store.delete("k", { fence: f("r", 1n, "h"), ifVersion: v2.version });
    expect(deleted.token).toBe(1n);
    expect(deleted.version).toMatch(/^[0-9]+$/);
    expect(counting.take(), "ifVersion delete, written").toEqual({ statements: 1, connects: 1, transactionControl: 0 });
    expect(await seed.get("k")).toBeUndefined();
  });

  it("on a key never written, or deleted, ifVersion is refused with no actual version; nothing is created, the ratchet is neither created nor raised", async () => {
    const store = await h.store("absent");
    for (const write of [
      () => store.put("never", 1, { fence: f("r", 5n, "h"), ifVersion: "1" }),
      () => store.delete("never", { fence: f("r", 5n, "h"), ifVersion: "1" }),
    ]) {
      const err = await outcome(write());
      expect(err).toBeInstanceOf(VersionMismatchError);
      expect(err).toMatchObject({ key: "never", expected: "1", actual: undefined });
      expect(await h.counts(store)).toEqual({ fence: 0, records: 0 });
    }

    const v = await store.put("gone", 1, { fence: f("r", 5n, "h") });
    await store.delete("gone", { fence: f("r", 5n, "h") });
    const tomb = await h.recordRow(store, "gone");
    for (const version of [v.version, tomb?.version ?? "1"]) {
      for (const write of [
        () => store.put("gone", 2, { fence: f("r", 6n, "h"), ifVersion: version }),
        () => store.delete("gone", { fence: f("r", 6n, "h"), ifVersion: version }),
      ]) {
        expect(await outcome(write())).toMatchObject({ name: "VersionMismatchError", key: "gone", expected: version, actual: undefined });
        expect(await h.recordRow(store, "gone")).toEqual(tomb);
        expect(await h.fenceRow(store, "r")).toEqual({ token: 5n, holder: "h" });
      }
    }
  });
});

describe("FencedPostgres: conditional writes racing for one version", () => {
  it("a conditional put waits behind another of the same version; once that commits it is refused — a version mismatch (higher token) or stale (lower, or equal from another holder) — and its ratchet raise is undone", async () => {
    const store = await h.store("cas_race");
    const s = `"${store.schema}"`;
    // Test scaffolding only: a write whose value says {"pause": <n>} stops after updating its row,
    // before its statement ends (and so before it commits), until the test releases advisory lock n.
    await h.pool.query(`
      CREATE FUNCTION ${s}.pause() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_xact_lock_shared((NEW.value->>'pause')::bigint); RETURN NULL; END $$;
      CREATE TRIGGER pause AFTER UPDATE ON ${s}.records FOR EACH ROW WHEN (NEW.value ? 'pause') EXECUTE FUNCTION ${s}.pause();
    `);
    const lock = 4343n + BigInt(process.pid % 1000) * 10n;
    const gatekeeper = await h.pool.connect();
    try {
      const cases: { first: Fence; second: Fence; refused: object }[] = [
        { first: f("r", 10n, "a"), second: f("r", 11n, "b"), refused: { name: "VersionMismatchError" } },
        {
          first: f("r", 20n, "a"),
          second: f("r", 19n, "b"),
          refused: { name: "StaleTokenError", token: 19n, highest: 20n, highestHolder: "a" },
        },
        {
          first: f("r", 30n, "a"),
          second: f("r", 30n, "b"),
          refused: { name: "StaleTokenError", token: 30n, highest: 30n, highestHolder: "a" },
        },
        // The same lease sending two conditional writes at once: the ratchet admits both, the version one.
        { first: f("r", 40n, "a"), second: f("r", 40n, "a"), refused: { name: "VersionMismatchError" } },
      ];
      for (const [i, { first, second, refused }] of cases.entries()) {
        const key = `k/${i}`;
        const base = await store.put(key, { n: 0 }, { fence: { ...first, token: first.token - 1n } });
        await gatekeeper.query("SELECT pg_advisory_lock($1)", [lock.toString()]);
        const winner = store.put(key, { n: 1, pause: lock.toString() }, { fence: first, ifVersion: base.version });
        const paused = async () => {
          const { rows } = await h.pool.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted",
            [Number(lock)],
          );
          return rows[0]?.n === 1;
        };
        await waitFor("the first conditional put to pause before its commit", paused, 10_000);
        const loser = outcome(store.put(key, { n: 1, by: "second" }, { fence: second, ifVersion: base.version }));
        expect(await stillPending(loser, 200), `case ${i}: the second waits for the fence row`).toBe(true);
        await gatekeeper.query("SELECT pg_advisory_unlock($1)", [lock.toString()]);
        const won = await winner;
        const err = await loser;
        expect(err, `case ${i}`).toMatchObject(refused);
        if (err instanceof VersionMismatchError) expect(err).toMatchObject({ key, expected: base.version, actual: won.version });
        expect(await store.get(key), `case ${i}`).toMatchObject({
          value: { n: 1 },
          version: won.version,
          token: first.token,
          holder: first.holder,
        });
        expect(await h.fenceRow(store, "r"), `case ${i}`).toEqual({ token: first.token, holder: first.holder });
      }
    } finally {
      await gatekeeper.query("SELECT pg_advisory_unlock_all()");
      gatekeeper.release();
    }
  });

  it("contenders with one expected version, puts and deletes, any tokens and holders: exactly one wins, every loser is refused as stale or as a version mismatch, and the record and the fence row are the winner's", async () => {
    const store = await h.store("cas_many");
    // xorshift32, seeded: the same contenders on every run.
    let state = 0x9e3779b9;
    const random = (n: number): number => {
      state ^= state << 13;
      state ^= state >>> 17;
      state ^= state << 5;
      return (state >>> 0) % n;
    };
    for (let round = 0; round < 60; round++) {
      const resource = `r${round}`;
      const key = `k/${round}`;
      const base = await store.put(key, { round }, { fence: f(resource, 4n, "h0") });
      const above = random(4);
      const contenders = Array.from({ length: 4 }, (_, i) => ({
        // Tokens 3–7 against the highest, 4 from h0: stale, equal from the same or another holder, higher.
        // One contender, at a random place, is always above it, so at least one is admitted.
        fence: f(resource, BigInt(i === above ? 5 + random(3) : 3 + random(5)), ["h0", "h1", undefined][random(3)]),
        kind: random(4) === 0 ? ("delete" as const) : ("put" as const),
        value: { round, by: i },
      }));
      const results = await Promise.all(
        contenders.map((c) =>
          outcome(
            c.kind === "delete"
              ? store.delete(key, { fence: c.fence, ifVersion: base.version })
              : store.put(key, c.value, { fence: c.fence, ifVersion: base.version }),
          ),
        ),
      );
      const winners = contenders.filter((_, i) => !(results[i] instanceof Error));
      expect(winners, `round ${round}: ${results.map(String).join(", ")}`).toHaveLength(1);
      for (const [i, r] of results.entries()) {
        if (r instanceof Error)
          expect(r instanceof StaleTokenError || r instanceof VersionMismatchError, `round ${round} #${i}: ${String(r)}`).toBe(true);
      }
      const winner = winners[0];
      if (winner === undefined) throw new Error("no winner");
      const row = await h.recordRow(store, key);
      expect(row, `round ${round}`).toMatchObject({
        value: winner.kind === "delete" ? undefined : winner.value,
        token: winner.fence.token,
        holder: winner.fence.holder ?? null,
        resource,
      });
      expect(row?.version).not.toBe(base.version);
      // Every loser's ratchet raise was undone with its refusal: the fence row is the winner's.
      expect(await h.fenceRow(store, resource), `round ${round}`).toEqual({
        token: winner.fence.token,
        holder: winner.fence.holder ?? null,
      });
    }
  });
});
