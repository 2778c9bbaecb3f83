// Pins the sealing the fence credentials and the gateway's lease ids rest on (sealed.ts), as
// properties: any fields round-trip; no string but the one sealed verifies (every single-character
// edit is refused, never read); the configured keys are frozen copies, so a caller changing its
// secret afterwards changes nothing; a sealed time reads back exactly or not at all.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "./errors.js";
import { CONTROL_CHARACTER } from "./rules.js";
import { credentialKeys, parseEpochMs, seal, SealError, unseal, type SealKind } from "./sealed.js";

const KIND: SealKind = { version: "t1", domain: "fenced test seal", fields: 3 };
const secret = (fill: number): Buffer => Buffer.alloc(32, fill);
const field = fc.string({ unit: "grapheme", maxLength: 30 }).filter((f) => !CONTROL_CHARACTER.test(f));

const problemOf = (sealed: unknown, keys: ReadonlyMap<string, { id: string; secret: Uint8Array }>): string | undefined => {
  try {
    unseal(KIND, sealed, keys);
  } catch (err) {
    expect(err).toBeInstanceOf(SealError);
    return (err as SealError).problem;
  }
  return undefined;
};

describe("sealed strings", () => {
  it("any fields without control characters unseal to themselves, under the key that sealed them", () => {
    const keys = credentialKeys([{ id: "k1", secret: secret(1) }]);
    fc.assert(
      fc.property(fc.array(field, { minLength: 3, maxLength: 3 }), (fields) => {
        expect(unseal(KIND, seal(KIND, fields, { id: "k1", secret: secret(1) }), keys)).toEqual({ fields, keyId: "k1" });
      }),
    );
  });

  it("any single character changed, dropped or added anywhere is refused (malformed or a bad signature), never read", () => {
    const keys = credentialKeys([{ id: "k1", secret: secret(1) }]);
    const good = seal(KIND, ["orders/42", "17", "holder-1"], { id: "k1", secret: secret(1) });
    fc.assert(
      fc.property(
        fc.nat({ max: good.length }),
        fc.constantFrom("A", "a", "0", "-", "_", ".", "="),
        fc.constantFrom("set", "drop", "add"),
        (at, c, edit) => {
          const edited =
            edit === "add"
              ? good.slice(0, at) + c + good.slice(at)
              : edit === "drop"
                ? good.slice(0, at) + good.slice(at + 1)
                : good.slice(0, at) + c + good.slice(at + 1);
          fc.pre(edited !== good);
          expect(["malformed", "bad-signature", "unknown-key"]).toContain(problemOf(edited, keys));
        },
      ),
    );
  });

  it("another key with the same id, or no key with its id, does not verify it", () => {
    const sealed = seal(KIND, ["a", "b", "c"], { id: "k1", secret: secret(1) });
    expect(problemOf(sealed, credentialKeys([{ id: "k1", secret: secret(2) }]))).toBe("bad-signature");
    expect(problemOf(sealed, credentialKeys([{ id: "k2", secret: secret(1) }]))).toBe("unknown-key");
    expect(problemOf("x".repeat(5000), credentialKeys([{ id: "k1", secret: secret(1) }]))).toBe("malformed");
    expect(problemOf(42, credentialKeys([{ id: "k1", secret: secret(1) }]))).toBe("malformed");
  });

  it("the configured keys are frozen copies: a secret changed by its owner afterwards changes nothing", () => {
    const mine = secret(1);
    const keys = credentialKeys([{ id: "k1", secret: mine }]);
    const sealed = seal(KIND, ["a", "b", "c"], { id: "k1", secret: secret(1) });
    mine.fill(9);
    expect(unseal(KIND, sealed, keys).fields).toEqual(["a", "b", "c"]);
    expect(Object.isFrozen(keys.get("k1"))).toBe(true);
  });

  it("keys: ids of 1-64 of A-Z a-z 0-9 _ -, secrets of at least 32 bytes, no id twice; fields: the kind's count, no control character", () => {
    expect(() => credentialKeys([{ id: "k1", secret: secret(1).subarray(0, 31) }])).toThrow(InvalidArgumentError);
    expect(() => credentialKeys([{ id: "k.1", secret: secret(1) }])).toThrow(InvalidArgumentError);
    expect(() => credentialKeys([{ id: "x".repeat(65), secret: secret(1) }])).toThrow(InvalidArgumentError);
    expect(() => credentialKeys([{ id: "k1", secret: "s".repeat(32) as unknown as Uint8Array }])).toThrow(InvalidArgumentError);
    expect(() =>
      credentialKeys([
        { id: "k1", secret: secret(1) },
        { id: "k1", secret: secret(2) },
      ]),
    ).toThrow(expect.objectContaining({ argument: "keys[1].id" }) as Error);
    expect(() => seal(KIND, ["a", "b"], { id: "k1", secret: secret(1) })).toThrow(InvalidArgumentError);
    expect(() => seal(KIND, ["a", "b\nc", "d"], { id: "k1", secret: secret(1) })).toThrow(InvalidArgumentError);
  });

  it("a sealed time is a decimal integer in Number's exact range, one spelling each; anything else is no time", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }), (ms) => {
        expect(parseEpochMs(String(ms))).toBe(ms);
        expect(parseEpochMs(`0${ms}`)).toBeUndefined();
      }),
    );
    for (const bad of ["", "-1", "1.0", "1e3", " 1", String(Number.MAX_SAFE_INTEGER + 1), "99999999999999999"])
      expect(parseEpochMs(bad), bad).toBeUndefined();
  });
});
