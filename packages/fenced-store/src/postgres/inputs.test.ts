// Pins what the PostgreSQL store refuses before any statement (options.ts, ../json.ts): a value jsonb
// cannot store exactly as given, a version the store never issued, a putAll whose writes are not one
// per key under a fence it presents, a pool that is not one — each InvalidArgumentError naming the
// argument (down to the path inside a value), so nothing is sent and nothing is written.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { InvalidArgumentError, MAX_TOKEN } from "@fenced/fence";
import { assertJsonValue } from "../json.js";
import { assertPool, MAX_PUT_ALL, putAllOptions, transferOptions, writeOptions } from "./options.js";

/** `check` throws an InvalidArgumentError naming `argument`. */
const refusedAs = (argument: string, check: () => unknown): void =>
  expect(check, argument).toThrow(expect.objectContaining({ constructor: InvalidArgumentError, argument }));

const a = { resource: "a", token: 1n, holder: "h" };
const b = { resource: "b", token: 2n, holder: "h" };

describe("a value to store as jsonb", () => {
  it("any JSON value without U+0000 passes", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        fc.pre(!JSON.stringify(value).includes("\\u0000"));
        expect(() => assertJsonValue(value)).not.toThrow();
      }),
    );
  });

  it("what JSON would change or drop is refused at its path: non-finite numbers, undefined, functions, bigints, holes, symbols", () => {
    const cases: [unknown, string][] = [
      [{ a: [1, Number.NaN] }, "value.a[1]"],
      [{ a: Number.POSITIVE_INFINITY }, "value.a"],
      [{ a: { b: undefined } }, "value.a.b"],
      [[() => 1], "value[0]"],
      [{ n: 1n }, "value.n"],
      [[1, , 3], "value[1]"], // eslint-disable-line no-sparse-arrays
      [{ [Symbol("s")]: 1 }, "value"],
      [undefined, "value"],
      // The path runs through every level: objects and arrays, nested.
      [{ a: [0, { b: [1, Number.NaN] }] }, "value.a[1].b[1]"],
      [[[{ c: { d: () => 1 } }]], "value[0][0].c.d"],
    ];
    for (const [value, path] of cases) refusedAs(path, () => assertJsonValue(value));
  });

  it("only plain objects and arrays: a Date, Map, Buffer or class instance is refused rather than stored as something else", () => {
    class Point {
      x = 1;
    }
    for (const value of [new Date(0), new Map(), Buffer.from("x"), new Point()]) refusedAs("value.v", () => assertJsonValue({ v: value }));
    expect(() => assertJsonValue(Object.create(null) as object)).not.toThrow();
  });

  it("what jsonb refuses is refused before sending: U+0000 and lone surrogates in strings or keys, circular and too deep nesting", () => {
    refusedAs("value.s", () => assertJsonValue({ s: "a\u0000b" }));
    refusedAs(`value key ${JSON.stringify("k\u0000")}`, () => assertJsonValue({ "k\u0000": 1 }));
    refusedAs(`value.a[0] key ${JSON.stringify("\uDC00")}`, () => assertJsonValue({ a: [{ ok: 1, "\uDC00": 1 }] }));
    refusedAs("value[0]", () => assertJsonValue(["\uD800"]));
    const loop: Record<string, unknown> = {};
    loop.self = loop;
    refusedAs("value.self", () => assertJsonValue(loop));
    let deep: unknown = 1;
    for (let i = 0; i < 257; i++) deep = [deep];
    expect(() => assertJsonValue(deep)).toThrow(/deeper than 256/);
    // One object reached twice is not a cycle.
    const shared = { x: 1 };
    expect(() => assertJsonValue({ p: shared, q: [shared] })).not.toThrow();
    expect(() => assertJsonValue({ s: "😀" })).not.toThrow();
  });

  it("a toJSON that JSON.stringify would call is refused: what it returns is not the value given", () => {
    // Not enumerable, so no key shows it; JSON.stringify calls it all the same (here: undefined, a NULL value).
    const hidden = Object.defineProperty({ a: 1 }, "toJSON", { value: () => undefined });
    refusedAs("value", () => assertJsonValue(hidden));
    refusedAs("value.v[1]", () => assertJsonValue({ v: [0, hidden] }));
    const list = Object.defineProperty([1, 2], "toJSON", { value: () => "not a list" });
    refusedAs("value", () => assertJsonValue(list));
    class Listed extends Array<number> {}
    refusedAs("value", () => assertJsonValue(Listed.from([1])));
    // A key named toJSON holding data is data: JSON.stringify calls only a function.
    expect(() => assertJsonValue(JSON.parse('{"toJSON":"x"}'))).not.toThrow();
  });

  it("an error the value itself throws (a getter) passes through as it is, not as a refusal", () => {
    const thrown = new RangeError("the getter's own");
    const value = {
      ok: 1,
      get bad(): never {
        throw thrown;
      },
    };
    expect(() => assertJsonValue({ nested: [value] })).toThrow(thrown);
  });
});

describe("a write's options", () => {
  it("ifVersion: a version this store issues, a positive int8 in decimal", () => {
    expect(writeOptions({ fence: a, ifVersion: "42" }).ifVersion).toBe("42");
    expect(writeOptions({ fence: a, ifVersion: MAX_TOKEN.toString() }).ifVersion).toBe(MAX_TOKEN.toString());
    for (const bad of ["0", "042", "-1", (MAX_TOKEN + 1n).toString(), "1e3", "", 42, null])
      refusedAs("options.ifVersion", () => writeOptions({ fence: a, ifVersion: bad }));
    refusedAs("options.fence", () => writeOptions({}));
    refusedAs("options.ifVersion", () => transferOptions({ from: a, to: b, ifVersion: "x" }));
    refusedAs("options.to.resource", () => transferOptions({ from: a, to: { ...a, token: 3n } }));
  });

  it("a pool is an object with query() and connect()", () => {
    expect(() => assertPool({ query: () => undefined, connect: () => undefined })).not.toThrow();
    for (const bad of [null, {}, { query: () => undefined }, "postgres://"]) refusedAs("pool", () => assertPool(bad));
  });
});

describe("putAll's writes", () => {
  it("each under the one fence given, or under the fence its resource names; one write per key", () => {
    const one = putAllOptions(
      [
        { key: "k1", value: 1 },
        { key: "k2", value: { n: 2 } },
      ],
      { fences: [a] },
    );
    expect(one.writes.map((w) => [w.key, w.json, w.fence.resource])).toEqual([
      ["k1", "1", "a"],
      ["k2", '{"n":2}', "a"],
    ]);
    const two = putAllOptions([{ key: "k", value: null, resource: "b", ifVersion: "7" }], { fences: [a, b] });
    expect(two.writes[0]).toMatchObject({ fence: b, ifVersion: "7", json: "null" });
    refusedAs("writes[1].key", () =>
      putAllOptions(
        [
          { key: "k", value: 1 },
          { key: "k", value: 2 },
        ],
        { fences: [a] },
      ),
    );
    refusedAs("writes[0].resource", () => putAllOptions([{ key: "k", value: 1 }], { fences: [a, b] }));
    refusedAs("writes[0].resource", () => putAllOptions([{ key: "k", value: 1, resource: "c" }], { fences: [a, b] }));
  });

  it("1 to MAX_PUT_ALL writes, each with a valid key, a storable value and an issued version", () => {
    const many = Array.from({ length: MAX_PUT_ALL + 1 }, (_, i) => ({ key: `k${i}`, value: i }));
    expect(putAllOptions(many.slice(0, MAX_PUT_ALL), { fences: [a] }).writes).toHaveLength(MAX_PUT_ALL);
    refusedAs("writes", () => putAllOptions(many, { fences: [a] }));
    refusedAs("writes", () => putAllOptions([], { fences: [a] }));
    refusedAs("writes", () => putAllOptions({ key: "k", value: 1 }, { fences: [a] }));
    refusedAs("writes[0].key", () => putAllOptions([{ key: "/k", value: 1 }], { fences: [a] }));
    refusedAs("writes[0].value.x", () => putAllOptions([{ key: "k", value: { x: Number.NaN } }], { fences: [a] }));
    refusedAs("writes[0].ifVersion", () => putAllOptions([{ key: "k", value: 1, ifVersion: "v1" }], { fences: [a] }));
    refusedAs("writes[0]", () => putAllOptions([null], { fences: [a] }));
    refusedAs("options.fences", () => putAllOptions([{ key: "k", value: 1 }], { fences: [] }));
  });
});
