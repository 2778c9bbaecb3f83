import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResourceMismatchError, StaleTokenError, VersionMismatchError } from "../errors.js";
import type { Fence } from "../fence.js";
import type { FencedPostgres } from "./store.js";
import { outcome, pgHarness, type PgHarness } from "./test-support.js";

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

const f = (resource: string, token: bigint, holder = "h"): Fence => ({ resource, token, holder });

/** Every fence row and record, as stored. */
async function tables(store: FencedPostgres) {
  const fence = await h.pool.query<{ resource: string; token: string; holder: string | null }>(
    `SELECT resource, token::text, holder FROM "${store.schema}".fence ORDER BY resource`,
  );
  const records = await h.pool.query<{ key: string; resource: string; token: string; version: string; live: boolean }>(
    `SELECT key, resource, token::text, version::text, value IS NOT NULL AS live FROM "${store.schema}".records ORDER BY key`,
  );
  return { fence: fence.rows, records: records.rows };
}

/** Records whose owner has no fence row, or one below the token that wrote them: what an orphan would look like. */
async function orphans(store: FencedPostgres): Promise<unknown[]> {
  const { rows } = await h.pool.query<{ key: string; resource: string; token: string }>(
    `SELECT r.key, r.resource, r.token::text FROM "${store.schema}".records r
     LEFT JOIN "${store.schema}".fence f ON f.resource = r.resource
     WHERE f.resource IS NULL OR f.token < r.token`,
  );
  return rows;
}

describe("FencedPostgres: nothing is left behind", () => {
  it("every refused or failed write leaves no fence row and no record; every record's owner keeps a fence row at or above its token", async () => {
    const store = await h.store("leftovers");
    const kept = await store.put("k", { n: 1 }, { fence: f("orders", 5n) });
    await store.put("gone", { n: 1 }, { fence: f("orders", 5n) });
    await store.delete("gone", { fence: f("orders", 5n) });
    await store.register(f("archive", 7n));
    await store.transfer("moved", { from: f("orders", 5n), to: f("archive", 7n) }); // never written: moves nothing
    await store.put("moved", { n: 1 }, { fence: f("orders", 6n) });
    await store.transfer("moved", { from: f("orders", 6n), to: f("archive", 8n) });
    const before = await tables(store);

    /** A transaction whose lease is lost while its work runs: the abort is seen before COMMIT. */
    const abortedDuringWork = () => {
      const controller = new AbortController();
      return store.transaction(f("ghost-m", 1n), () => Promise.resolve(controller.abort(new Error("lease lost"))), {
        signal: controller.signal,
      });
    };
    // Each names a resource ("ghost-…") or a key ("ghost/…") that no admitted write ever named.
    const failures: [string, () => Promise<unknown>, unknown][] = [
      ["put of another resource's key", () => store.put("k", 2, { fence: f("ghost-a", 1n) }), ResourceMismatchError],
      ["stale put of a new key", () => store.put("ghost/1", 2, { fence: f("orders", 4n) }), StaleTokenError],
      [
        "conditional put of a key never written",
        () => store.put("ghost/2", 2, { fence: f("ghost-b", 1n), ifVersion: "1" }),
        VersionMismatchError,
      ],
      [
        "conditional put of another resource's key",
        () => store.put("k", 2, { fence: f("ghost-c", 1n), ifVersion: kept.version }),
        ResourceMismatchError,
      ],
      ["delete of another resource's key", () => store.delete("k", { fence: f("ghost-d", 1n) }), ResourceMismatchError],
      [
        "conditional delete of a key never written",
        () => store.delete("ghost/3", { fence: f("ghost-e", 1n), ifVersion: "1" }),
        VersionMismatchError,
      ],
      ["stale delete of a new key", () => store.delete("ghost/4", { fence: f("orders", 4n) }), StaleTokenError],
      [
        "transfer from a resource that does not own the key",
        () => store.transfer("k", { from: f("ghost-f", 1n), to: f("ghost-g", 1n) }),
        ResourceMismatchError,
      ],
      ["transfer to a stale fence", () => store.transfer("k", { from: f("orders", 9n), to: f("archive", 1n) }), StaleTokenError],
      [
        "transfer with ifVersion of a key never written",
        () => store.transfer("ghost/5", { from: f("ghost-h", 1n), to: f("ghost-i", 1n), ifVersion: "1" }),
        VersionMismatchError,
      ],
      ["transfer of a key never written", () => store.transfer("ghost/6", { from: f("ghost-j", 1n), to: f("ghost-k", 1n) }), undefined],
      [
        "transaction whose work throws",
        () => store.transaction(f("ghost-l", 1n), () => Promise.reject(new RangeError("work failed"))),
        RangeError,
      ],
      ["transaction aborted during its work", abortedDuringWork, Error],
    ];
    for (const [what, failing, expected] of failures) {
      const result = await outcome(failing());
      if (expected === undefined) expect(result, what).toBeUndefined();
      else expect(result, what).toBeInstanceOf(expected);
      expect(await tables(store), what).toEqual(before);
    }
    expect(before.fence.map((r) => r.resource)).toEqual(["archive", "orders"]);
    expect(before.records.map((r) => [r.key, r.resource, r.live])).toEqual([
      ["gone", "orders", false],
      ["k", "orders", true],
      ["moved", "archive", true],
    ]);
    expect(await orphans(store)).toEqual([]);
  });
});
