import { InvalidArgumentError } from "@fenced/fence";
import { waitFor } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResourceMismatchError, StaleTokenError, VersionMismatchError } from "../errors.js";
import type { FencedPostgres } from "./store.js";
import { fenceAt as f, outcome, pgHarness, type PgHarness, stillPending } from "./test-support.js";

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

/** What a refused call must leave alone: the key's row and the fence rows of every resource involved. */
async function state(store: FencedPostgres, key: string, resources: readonly string[]) {
  const fences: Record<string, unknown> = {};
  for (const r of resources) fences[r] = await h.fenceRow(store, r);
  return { record: await h.recordRow(store, key), fences, counts: await h.counts(store) };
}

describe("FencedPostgres: a key belongs to the resource that created it", () => {
  it("put, delete and ifVersion put naming another resource (token 0) are refused; the record, its version and both fence rows are unchanged", async () => {
    const store = await h.store("owner");
    const written = await store.put("invoice/7", { total: 100 }, { fence: f("R", 34n, "h34") });
    await store.register(f("S", 0n)); // S has a fence row of its own, at 0
    const before = await state(store, "invoice/7", ["R", "S", "T"]);
    expect(before.fences).toEqual({ R: { token: 34n, holder: "h34" }, S: { token: 0n, holder: null }, T: undefined });
    expect(before.record).toMatchObject({ value: { total: 100 }, version: written.version, token: 34n, resource: "R", holder: "h34" });

    const attempts: [string, () => Promise<unknown>][] = [
      ["put S@0", () => store.put("invoice/7", { total: 0 }, { fence: f("S", 0n) })],
      ["put S@1 (would raise S)", () => store.put("invoice/7", { total: 0 }, { fence: f("S", 1n) })],
      ["put T@0 (would create T's row)", () => store.put("invoice/7", { total: 0 }, { fence: f("T", 0n) })],
      ["put S@0 ifVersion", () => store.put("invoice/7", { total: 0 }, { fence: f("S", 0n), ifVersion: written.version })],
      ["put T@0 ifVersion", () => store.put("invoice/7", { total: 0 }, { fence: f("T", 0n), ifVersion: written.version })],
      ["put S@1 ifVersion (would raise S)", () => store.put("invoice/7", { total: 0 }, { fence: f("S", 1n), ifVersion: written.version })],
      ["delete S@0", () => store.delete("invoice/7", { fence: f("S", 0n) })],
      ["delete T@5", () => store.delete("invoice/7", { fence: f("T", 5n) })],
      ["delete S@0 ifVersion", () => store.delete("invoice/7", { fence: f("S", 0n), ifVersion: written.version })],
      ["delete T@1 ifVersion (would create T's row)", () => store.delete("invoice/7", { fence: f("T", 1n), ifVersion: written.version })],
    ];
    for (const [what, attempt] of attempts) {
      const err = await outcome(attempt());
      expect(err, what).toBeInstanceOf(ResourceMismatchError);
      expect(err, what).toMatchObject({ key: "invoice/7", owner: "R", code: "RESOURCE_MISMATCH" });
      expect(await state(store, "invoice/7", ["R", "S", "T"]), what).toEqual(before);
    }
    // The owner still writes.
    await store.put("invoice/7", { total: 101 }, { fence: f("R", 34n, "h34") });
    expect(await store.get("invoice/7")).toMatchObject({ value: { total: 101 }, resource: "R" });
  });

  it("a stale fence of another resource is refused as stale first: the ratchet is checked before ownership", async () => {
    const store = await h.store("owner_order");
    await store.put("k", 1, { fence: f("R", 3n) });
    await store.register(f("S", 9n));
    await expect(store.put("k", 2, { fence: f("S", 8n) })).rejects.toBeInstanceOf(StaleTokenError);
    await expect(store.put("k", 2, { fence: f("S", 9n) })).rejects.toBeInstanceOf(ResourceMismatchError);
  });

  it("a delete leaves a tombstone that keeps the owner: get() says undefined, another resource cannot re-create the key, the owner can", async () => {
    const store = await h.store("tombstone");
    const v1 = await store.put("doc", "one", { fence: f("R", 2n) });
    const first = await store.delete("doc", { fence: f("R", 2n) });
    expect(await store.get("doc")).toBeUndefined();
    expect(await h.recordRow(store, "doc")).toMatchObject({ value: undefined, resource: "R", token: 2n, version: first.version });
    expect(first.version).not.toBe(v1.version); // the delete is a write with a version of its own
    // Deleting the tombstone writes another (as S3's delete does): a new version, the same owner.
    const second = await store.delete("doc", { fence: f("R", 2n) });
    expect(second.token).toBe(2n);
    expect(second.version).not.toBe(first.version);
    const tomb = await h.recordRow(store, "doc");
    expect(tomb).toMatchObject({ value: undefined, resource: "R", token: 2n, version: second.version });

    const before = await state(store, "doc", ["R", "S"]);
    await expect(store.put("doc", "stolen", { fence: f("S", 0n) })).rejects.toMatchObject({ name: "ResourceMismatchError", owner: "R" });
    await expect(store.delete("doc", { fence: f("S", 0n) })).rejects.toBeInstanceOf(ResourceMismatchError);
    expect(await state(store, "doc", ["R", "S"])).toEqual(before);
    // ifVersion never matches a tombstone: get() never handed its version out.
    await expect(store.put("doc", "x", { fence: f("R", 2n), ifVersion: tomb?.version ?? "1" })).rejects.toMatchObject({
      name: "VersionMismatchError",
      actual: undefined,
    });

    const v2 = await store.put("doc", "two", { fence: f("R", 3n) });
    expect(await store.get("doc")).toMatchObject({ value: "two", version: v2.version, resource: "R" });
    expect([v1.version, tomb?.version]).not.toContain(v2.version);
    await expect(store.put("doc", "x", { fence: f("R", 3n), ifVersion: v1.version })).rejects.toBeInstanceOf(VersionMismatchError);
  });

  it("deleting a key that never existed writes a tombstone: the key then belongs to the deleting resource", async () => {
    const store = await h.store("delete_missing");
    const deleted = await store.delete("ghost", { fence: f("R", 1n) });
    expect(deleted.token).toBe(1n);
    expect(deleted.version).toMatch(/^[0-9]+$/);
    expect(await store.get("ghost")).toBeUndefined();
    expect(await h.recordRow(store, "ghost")).toMatchObject({ value: undefined, resource: "R", token: 1n, version: deleted.version });
    const before = await state(store, "ghost", ["R", "S"]);
    await expect(store.put("ghost", "by S", { fence: f("S", 1n) })).rejects.toMatchObject({ name: "ResourceMismatchError", owner: "R" });
    await expect(store.delete("ghost", { fence: f("S", 1n) })).rejects.toMatchObject({ name: "ResourceMismatchError", owner: "R" });
    expect(await state(store, "ghost", ["R", "S"])).toEqual(before);
    // The owner's ratchet covers the tombstone: a stale fence of R writes nothing either.
    await store.register(f("R", 2n));
    await expect(store.delete("ghost", { fence: f("R", 1n) })).rejects.toBeInstanceOf(StaleTokenError);
    const v = await store.put("ghost", "by R", { fence: f("R", 2n) });
    expect(await store.get("ghost")).toMatchObject({ value: "by R", version: v.version, resource: "R" });
  });
});

describe("FencedPostgres: transfer() moves a key between resources, fenced on both sides", () => {
  it("moves ownership: the old resource is refused afterwards, the new one writes; the version changes", async () => {
    const store = await h.store("transfer");
    const v1 = await store.put("acct", { balance: 5 }, { fence: f("old", 34n, "a") });
    await store.register(f("new", 1n, "b"));
    const moved = await store.transfer("acct", { from: f("old", 34n, "a"), to: f("new", 2n, "b") });
    expect(moved).toMatchObject({ token: 2n });
    expect(moved?.version).not.toBe(v1.version);
    expect(await store.get("acct")).toEqual({ value: { balance: 5 }, version: moved?.version, token: 2n, resource: "new", holder: "b" });
    expect(await h.fenceRow(store, "old")).toEqual({ token: 34n, holder: "a" });
    expect(await h.fenceRow(store, "new")).toEqual({ token: 2n, holder: "b" });
    await expect(store.put("acct", {}, { fence: f("old", 35n) })).rejects.toMatchObject({
      name: "ResourceMismatchError",
      resource: "old",
      owner: "new",
    });
    await expect(store.put("acct", {}, { fence: f("new", 2n, "b"), ifVersion: v1.version })).rejects.toBeInstanceOf(VersionMismatchError);
    await store.put("acct", { balance: 6 }, { fence: f("new", 2n, "b"), ifVersion: moved?.version ?? "" });
    expect(await store.get("acct")).toMatchObject({ value: { balance: 6 }, resource: "new" });
  });

  it("is refused, changing nothing, when from or to is stale, from does not own the key, or ifVersion does not match", async () => {
    const store = await h.store("transfer_refused");
    const v = await store.put("acct", 1, { fence: f("old", 34n, "a") });
    await store.register(f("new", 10n, "b"));
    await store.put("elsewhere", 1, { fence: f("third", 1n) });
    const before = await state(store, "acct", ["old", "new", "third"]);
    const older = String(BigInt(v.version) + 1000n); // a version the record is not at
    const refusals: [string, () => Promise<unknown>, object][] = [
      [
        "stale from",
        () => store.transfer("acct", { from: f("old", 33n, "a"), to: f("new", 11n, "b") }),
        { name: "StaleTokenError", resource: "old", token: 33n, highest: 34n },
      ],
      [
        "from: equal token, other holder",
        () => store.transfer("acct", { from: f("old", 34n, "z"), to: f("new", 11n, "b") }),
        { name: "StaleTokenError", resource: "old", highestHolder: "a" },
      ],
      [
        "stale to",
        () => store.transfer("acct", { from: f("old", 35n, "a"), to: f("new", 9n, "b") }),
        { name: "StaleTokenError", resource: "new", token: 9n, highest: 10n },
      ],
      [
        "to: equal token, other holder",
        () => store.transfer("acct", { from: f("old", 35n, "a"), to: f("new", 10n, "c") }),
        { name: "StaleTokenError", resource: "new", highestHolder: "b" },
      ],
      [
        "from does not own it",
        () => store.transfer("acct", { from: f("third", 1n), to: f("new", 11n, "b") }),
        { name: "ResourceMismatchError", key: "acct", resource: "third", owner: "old" },
      ],
      [
        "the owner is already to",
        () => store.transfer("acct", { from: f("new", 11n, "b"), to: f("third", 2n) }),
        { name: "ResourceMismatchError", resource: "new", owner: "old" },
      ],
      [
        "ifVersion",
        () => store.transfer("acct", { from: f("old", 35n, "a"), to: f("new", 11n, "b"), ifVersion: older }),
        { name: "VersionMismatchError", expected: older, actual: v.version },
      ],
    ];
    for (const [what, refused, expected] of refusals) {
      expect(await outcome(refused()), what).toMatchObject(expected);
      expect(await state(store, "acct", ["old", "new", "third"]), what).toEqual(before);
    }
    // A key that was never written: nothing to move, nothing written (no fence row is created either).
    expect(await store.transfer("never", { from: f("x", 1n), to: f("y", 1n) })).toBeUndefined();
    expect([await h.fenceRow(store, "x"), await h.fenceRow(store, "y")]).toEqual([undefined, undefined]);
    expect(await store.get("never")).toBeUndefined();
    expect(await h.recordRow(store, "never")).toBeUndefined();
    await expect(store.transfer("never", { from: f("x", 1n), to: f("y", 1n), ifVersion: "5" })).rejects.toMatchObject({
      name: "VersionMismatchError",
      actual: undefined,
    });
    await expect(store.transfer("acct", { from: f("old", 35n), to: f("old", 36n) })).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await state(store, "acct", ["old", "new", "third"])).toEqual(before);
  });

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
