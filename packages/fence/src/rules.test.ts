import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "./errors.js";
import { admits, checkFence } from "./fence.js";
import { assertKey, assertResource, keyProblem, MAX_KEY_LENGTH, MAX_TOKEN, parseToken, resourceProblem } from "./rules.js";

describe("the rules every package shares", () => {
  it("a resource: 1-512 UTF-16 units, no control characters, no lone surrogates", () => {
    for (const good of ["orders/42", "x".repeat(512), "{braces}", "ünï/😀"]) expect(resourceProblem(good), good).toBeUndefined();
    for (const bad of ["", "x".repeat(513), "a\nb", "a\u0000", "a\u0085", "a\uD800", "\uDC00b", 42, null]) {
      expect(() => assertResource(bad), String(bad)).toThrow(InvalidArgumentError);
    }
  });

  it("a key: 1-512 UTF-8 bytes of well-formed Unicode, no control characters, no empty, '.' or '..' segments, no leading '/'", () => {
    const good = [
      "k",
      "orders/42",
      "a/b.c/..d",
      "x".repeat(MAX_KEY_LENGTH),
      "é".repeat(MAX_KEY_LENGTH / 2),
      "ünï/😀",
      "😀",
      "a\uFFFD",
      "{braces} and spaces",
    ];
    for (const key of good) expect(keyProblem(key), key).toBeUndefined();
    const bad: unknown[] = [
      "",
      "x".repeat(MAX_KEY_LENGTH + 1),
      "é".repeat(MAX_KEY_LENGTH / 2) + "x",
      "/a",
      "a//b",
      "a/",
      "./a",
      "a/./b",
      "a/..",
      "a\nb",
      "a\u0000",
      "a\u0085",
    ];
    // Lone surrogates, each of which PostgreSQL would store as U+FFFD and S3 could not name at all.
    bad.push("a\uD800", "\uDC00b", "a\uD800b", "a\uDC00", "\uDE00\uD83D", "😀".slice(0, 1), 42, null, undefined);
    for (const key of bad) {
      expect(keyProblem(key), String(key)).toBeTypeOf("string");
      expect(() => assertKey(key), String(key)).toThrow(InvalidArgumentError);
    }
    expect(keyProblem("a\uD800")).toBe("must be well-formed Unicode (no lone surrogates)");
    expect(() => assertKey("a\uDC00", "prefix")).toThrow(expect.objectContaining({ argument: "prefix" }));
  });

  it("a token's wire form has one spelling per value in 0..2^63-1", () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: MAX_TOKEN }), (t) => {
        expect(parseToken(t.toString())).toBe(t);
      }),
    );
    for (const bad of ["", "-1", "01", "1e3", " 1", "+1", (MAX_TOKEN + 1n).toString(), "99999999999999999999"])
      expect(() => parseToken(bad), bad).toThrow(InvalidArgumentError);
  });

  it("a fence is copied on check, and its holder decides equal tokens", () => {
    const live = { resource: "r", token: 5n, holder: "h1" };
    const checked = checkFence(live);
    live.token = 1n;
    expect(checked).toEqual({ resource: "r", token: 5n, holder: "h1" });
    expect(checkFence({ resource: "r", token: 5n })).toEqual({ resource: "r", token: 5n, holder: null });
    for (const bad of [
      null,
      {},
      { resource: "r", token: 5 },
      { resource: "r", token: -1n },
      { resource: "r", token: 1n, holder: "" },
      { resource: "r", token: 1n, holder: "a b" },
    ]) {
      expect(
        () => checkFence(bad),
        JSON.stringify(bad, (_k, v: unknown) => (typeof v === "bigint" ? `${v}n` : v)),
      ).toThrow(InvalidArgumentError);
    }
    const highest = { token: 5n, holder: "h1" };
    expect(admits(highest, { resource: "r", token: 6n, holder: "h2" })).toBe(true);
    expect(admits(highest, { resource: "r", token: 5n, holder: "h1" })).toBe(true);
    expect(admits(highest, { resource: "r", token: 5n, holder: "h2" })).toBe(false);
    expect(admits(highest, { resource: "r", token: 5n, holder: null })).toBe(false);
    expect(admits(highest, { resource: "r", token: 4n, holder: "h1" })).toBe(false);
    expect(admits({ token: 5n, holder: null }, { resource: "r", token: 5n, holder: null })).toBe(true);
  });
});
