import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResourceMismatchError, StaleTokenError } from "../errors.js";
import type { Fence } from "../fence.js";
import { fenceAt, outcome, pgHarness, type PgHarness } from "./test-support.js";

/**
 * A call of several fences sends its resources to PostgreSQL as array literals (sql.ts, textArray),
 * where a call of one fence sends a plain parameter. If the two spellings could ever name different
 * rows — an element that splits, ends the array, reads as NULL, or comes back another string — a set
 * would raise (and check) the ratchet of a resource other than the one it names, and single-fence
 * writers of that resource would not be ordered against it. Here the resources are chosen to break an
 * array literal, and pairs that differ only where a normalising or case-folding system would merge
 * them; each must be one row, the very row a single-fence write of it meets.
 */

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

/** Resources an array literal must carry verbatim: quotes, backslashes, braces, commas, NULL, spaces, non-ASCII. */
const AWKWARD: readonly string[] = [
  "a\\",
  "a\\\\",
  '"',
  '\\"',
  'a"b',
  '"quoted"',
  "{a,b}",
  "{",
  "}",
  "a,b",
  ",",
  "NULL",
  "null",
  " NULL ",
  " padded ",
  " ",
  "'",
  "a''b",
  "[1:1]={x}",
  "$1",
  "E'\\x41'",
  "\\N",
  "é",
  "e\u0301",
  "A",
  "a",
  "a ",
  "ß",
  "ss",
  "\u00a0",
  "\u3000",
  "😀",
  "\u{10ffff}",
  "x".repeat(512),
];

const f = (resource: string, token: bigint, holder = "h1"): Fence => fenceAt(resource, token, holder);

describe("FencedPostgres: a set's resources are the rows a single fence of each names", () => {
  it("register() of the set creates one row per resource, spelled exactly; single-fence writes of each meet that row", async () => {
    const store = await h.store("spell_register");
    await store.register(AWKWARD.map((r) => f(r, 10n)));
    const { rows } = await h.pool.query<{ resource: string; token: string; holder: string }>(
      `SELECT resource, token::text, holder FROM "${store.schema}".fence`,
    );
    expect(rows.length).toBe(AWKWARD.length);
    expect(new Set(rows.map((r) => r.resource))).toEqual(new Set(AWKWARD));
    for (const row of rows) expect([row.token, row.holder]).toEqual(["10", "h1"]);
    for (const [i, resource] of AWKWARD.entries()) {
      // Below the set's token: refused, so the set raised exactly this resource's ratchet.
      const stale = await outcome(store.put(`k/${i}`, 1, { fence: f(resource, 9n) }));
      expect(stale, JSON.stringify(resource)).toBeInstanceOf(StaleTokenError);
      expect((stale as StaleTokenError).highest).toBe(10n);
      // The same token from another holder: refused too; from the set's holder: admitted.
      expect(await outcome(store.put(`k/${i}`, 1, { fence: f(resource, 10n, "h2") })), JSON.stringify(resource)).toBeInstanceOf(
        StaleTokenError,
      );
      await store.put(`k/${i}`, 1, { fence: f(resource, 10n) });
    }
    expect(await h.counts(store)).toEqual({ fence: AWKWARD.length, records: AWKWARD.length });
  });

  it("putAll() under the set writes each key owned by exactly the resource it names; no other resource can write it", async () => {
    const store = await h.store("spell_put_all");
    const fences = AWKWARD.map((r, i) => f(r, BigInt(i + 1)));
    await store.putAll(
      AWKWARD.map((resource, i) => ({ key: `k/${i}`, value: i, resource })),
      { fences },
    );
    for (const [i, resource] of AWKWARD.entries()) {
      expect(await h.recordRow(store, `k/${i}`), JSON.stringify(resource)).toMatchObject({ resource, token: BigInt(i + 1), value: i });
      expect(await h.fenceRow(store, resource)).toEqual({ token: BigInt(i + 1), holder: "h1" });
      // Its neighbour in the list (a near-spelling for most: "é"/"e\u0301", "A"/"a", "a"/"a ", "ß"/"ss") does not own it.
      const neighbour = AWKWARD[(i + 1) % AWKWARD.length] as string;
      const foreign = await outcome(store.put(`k/${i}`, "x", { fence: f(neighbour, 1_000n) }));
      expect(foreign, `${JSON.stringify(neighbour)} on ${JSON.stringify(resource)}'s key`).toBeInstanceOf(ResourceMismatchError);
    }
  });

  it("one stale resource of the set, whichever: StaleTokenError naming it as spelled, and no row of the set moves", async () => {
    const store = await h.store("spell_stale");
    await store.register(AWKWARD.map((r) => f(r, 5n)));
    for (const resource of ["a\\", '"', "NULL", " padded ", "e\u0301", "a "]) {
      // Raised alone, through the single-fence statement.
      await store.register(f(resource, 50n, "h9"));
      const refused = await outcome(
        store.transaction(
          AWKWARD.map((r) => f(r, 6n)),
          () => Promise.resolve(),
        ),
      );
      expect(refused, JSON.stringify(resource)).toBeInstanceOf(StaleTokenError);
      expect((refused as StaleTokenError).resource).toBe(resource);
      const { rows } = await h.pool.query<{ resource: string; token: string }>(`SELECT resource, token::text FROM "${store.schema}".fence`);
      for (const row of rows) expect(row.token, JSON.stringify(row.resource)).toBe(row.resource === resource ? "50" : "5");
      await h.pool.query(`UPDATE "${store.schema}".fence SET token = 5, holder = 'h1' WHERE resource = $1`, [resource]);
    }
  });
});
