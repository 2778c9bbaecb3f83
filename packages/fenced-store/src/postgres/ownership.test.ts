import { waitFor } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResourceMismatchError, StaleTokenError } from "../errors.js";
import { fenceAt as f, outcome, pgHarness, type PgHarness, stillPending } from "./test-support.js";

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

// The rule itself (refusals under another resource, tombstones, transfer) is the conformance suite's
// (../conformance/rules-test-support.ts); here, what PostgreSQL adds: its order of checks, races, deadlocks.
describe("FencedPostgres: a key belongs to the resource that created it", () => {
  it("a stale fence of another resource is refused as stale first: the ratchet is checked before ownership", async () => {
    const store = await h.store("owner_order");
    await store.put("k", 1, { fence: f("R", 3n) });
    await store.register(f("S", 9n));
    await expect(store.put("k", 2, { fence: f("S", 8n) })).rejects.toBeInstanceOf(StaleTokenError);
    await expect(store.put("k", 2, { fence: f("S", 9n) })).rejects.toBeInstanceOf(ResourceMismatchError);
  });
});

describe("FencedPostgres: transfer() moves a key between resources, fenced on both sides", () => {
  it("moves a tombstone too, so the new owner may re-create the key", async () => {
    const store = await h.store("transfer_tomb");
    await store.put("k", 1, { fence: f("old", 1n) });
    await store.delete("k", { fence: f("old", 1n) });
    const moved = await store.transfer("k", { from: f("old", 1n), to: f("new", 1n) });
    expect(moved).toBeDefined();
    expect(await store.get("k")).toBeUndefined();
    expect(await h.recordRow(store, "k")).toMatchObject({ value: undefined, resource: "new" });
    await expect(store.put("k", 2, { fence: f("old", 2n) })).rejects.toBeInstanceOf(ResourceMismatchError);
    await store.put("k", 2, { fence: f("new", 1n) });
    expect(await store.get("k")).toMatchObject({ value: 2, resource: "new" });
  });

  it("transfers in opposite directions at once neither deadlock nor lose a key", async () => {
    const store = await h.store("transfer_cross");
    for (let i = 0; i < 20; i++) {
      await store.put(`a/${i}`, i, { fence: f("A", 1n) });
      await store.put(`b/${i}`, i, { fence: f("B", 1n) });
    }
    const results = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) => [
        store.transfer(`a/${i}`, { from: f("A", 1n), to: f("B", 1n) }),
        store.transfer(`b/${i}`, { from: f("B", 1n), to: f("A", 1n) }),
      ]).flat(),
    );
    expect(results.filter((r) => r.status === "rejected")).toEqual([]);
    for (let i = 0; i < 20; i++) {
      expect(await store.get(`a/${i}`)).toMatchObject({ value: i, resource: "B" });
      expect(await store.get(`b/${i}`)).toMatchObject({ value: i, resource: "A" });
    }
  });
});

describe("FencedPostgres: two resources create one key at the same time", () => {
  it("the one whose insert commits first owns it; the other waits for it, is refused, and its ratchet is neither created nor raised", async () => {
    const store = await h.store("create_race");
    const s = `"${store.schema}"`;
    // Test scaffolding only: r1's insert of a "race/…" key pauses, after inserting its row and before
    // committing, until the test releases advisory lock 4242. That pins the interleaving.
    await h.pool.query(`
      CREATE FUNCTION ${s}.pause() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NULL; END $$;
      CREATE TRIGGER pause AFTER INSERT ON ${s}.records FOR EACH ROW WHEN (NEW.key LIKE 'race/%' AND NEW.resource = 'r1') EXECUTE FUNCTION ${s}.pause();
    `);
    await store.register(f("r2-old", 5n, "o"));
    const gatekeeper = await h.pool.connect();
    try {
      for (const [key, loser, token] of [
        ["race/new", "r2", 0n],
        ["race/old", "r2-old", 9n],
      ] as const) {
        await gatekeeper.query("SELECT pg_advisory_lock(4242)");
        const first = store.put(key, "by r1", { fence: f("r1", 1n) });
        const paused = async () => {
          const { rows } = await h.pool.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted",
          );
          return rows[0]?.n === 1;
        };
        await waitFor("r1's insert to pause before its commit", paused, 10_000);
        const second = outcome(store.put(key, `by ${loser}`, { fence: f(loser, token, "l") }));
        expect(await stillPending(second, 200), "the second writer waits for the first one's uncommitted row").toBe(true);
        await gatekeeper.query("SELECT pg_advisory_unlock(4242)");
        expect(await first).toMatchObject({ token: 1n });
        const err = await second;
        expect(err).toBeInstanceOf(ResourceMismatchError);
        expect(err).toMatchObject({ key, resource: loser, owner: "r1" });
        expect(await store.get(key)).toMatchObject({ value: "by r1", resource: "r1", token: 1n });
      }
      expect(await h.fenceRow(store, "r2")).toBeUndefined();
      expect(await h.fenceRow(store, "r2-old")).toEqual({ token: 5n, holder: "o" });
    } finally {
      await gatekeeper.query("SELECT pg_advisory_unlock_all()");
      gatekeeper.release();
    }
  });

  it("eight resources racing for each of 15 keys: exactly one owner per key, every loser refused, only the winners' ratchets exist", async () => {
    const store = await h.store("create_race_many");
    for (let round = 0; round < 15; round++) {
      const resources = Array.from({ length: 8 }, (_, i) => `r${round}.${i}`);
      const results = await Promise.all(resources.map((r) => outcome(store.put(`k/${round}`, r, { fence: f(r, 7n) }))));
      const winners = resources.filter((_, i) => !(results[i] instanceof Error));
      expect(winners).toHaveLength(1);
      const owner = winners[0] ?? "";
      expect(await store.get(`k/${round}`)).toMatchObject({ value: owner, resource: owner });
      resources.forEach((r, i) => {
        if (r !== owner) expect(results[i]).toMatchObject({ name: "ResourceMismatchError", resource: r, owner });
      });
      for (const r of resources) expect(await h.fenceRow(store, r), r).toEqual(r === owner ? { token: 7n, holder: null } : undefined);
    }
  });
});
