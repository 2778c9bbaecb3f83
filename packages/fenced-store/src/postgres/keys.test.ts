import { InvalidArgumentError } from "@fenced/fence";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FencedPostgres } from "./store.js";
import { fenceAt, outcome, pgHarness, type PgHarness } from "./test-support.js";

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

/** PostgreSQL stores a lone surrogate as U+FFFD: both would name the row of "a\uFFFD" if the store let them through. */
const LONE_SURROGATES = ["a\uD800", "a\uDC00"];
const REPLACEMENT = "a\uFFFD";

/** Every entry point that takes a key, called with `key`. */
function everyCall(store: FencedPostgres, key: string, version: string): [string, () => Promise<unknown>][] {
  const fence = fenceAt("r", 5n, "h1");
  return [
    ["put", () => store.put(key, { by: "intruder" }, { fence })],
    ["put ifVersion", () => store.put(key, { by: "intruder" }, { fence, ifVersion: version })],
    ["get", () => store.get(key)],
    ["delete", () => store.delete(key, { fence })],
    ["delete ifVersion", () => store.delete(key, { fence, ifVersion: version })],
    ["transfer", () => store.transfer(key, { from: fence, to: fenceAt("r2", 1n, "h1") })],
    ["transfer ifVersion", () => store.transfer(key, { from: fence, to: fenceAt("r2", 1n, "h1"), ifVersion: version })],
  ];
}

describe("FencedPostgres: no two keys share a row", () => {
  it("a key with a lone surrogate is refused by every entry point before any I/O", async () => {
    let io = 0;
    const trap = {
      query: () => ((io += 1), Promise.reject(new Error("I/O"))),
      connect: () => ((io += 1), Promise.reject(new Error("I/O"))),
    };
    const store = new FencedPostgres(trap, { schema: "unused" });
    for (const key of LONE_SURROGATES) {
      for (const [what, call] of everyCall(store, key, "1")) {
        const err = await outcome(call());
        expect(err, `${what} ${JSON.stringify(key)}: ${String(err)}`).toBeInstanceOf(InvalidArgumentError);
        expect(err, what).toMatchObject({ argument: "key", message: "key: must be well-formed Unicode (no lone surrogates)" });
      }
    }
    expect(io).toBe(0);
  });

  it("'a\\uFFFD' keeps its own record: the lone-surrogate keys that PostgreSQL would encode as it are refused and write nothing", async () => {
    const store = await h.store("lone_surrogate");
    const written = await store.put(REPLACEMENT, { own: true }, { fence: fenceAt("r", 5n, "h1") });
    // Its neighbours are rows of their own too: valid keys that differ in any code point never share one.
    const neighbours = ["a", "a\uFFFD\uFFFD", "a😀", "a\u00E9", "ae\u0301"];
    for (const key of neighbours) await store.put(key, key, { fence: fenceAt("r", 5n, "h1") });
    const before = { counts: await h.counts(store), row: await h.recordRow(store, REPLACEMENT), fence: await h.fenceRow(store, "r") };
    for (const key of LONE_SURROGATES) {
      for (const [what, call] of everyCall(store, key, written.version)) {
        await expect(call(), `${what} ${JSON.stringify(key)}`).rejects.toBeInstanceOf(InvalidArgumentError);
      }
    }
    expect(await h.counts(store)).toEqual(before.counts);
    expect(await h.recordRow(store, REPLACEMENT)).toEqual(before.row);
    expect(await h.fenceRow(store, "r")).toEqual(before.fence);
    expect(await store.get(REPLACEMENT)).toEqual({
      value: { own: true },
      version: written.version,
      token: 5n,
      resource: "r",
      holder: "h1",
    });
    for (const key of neighbours) expect((await store.get(key))?.value, key).toBe(key);
  });
});
