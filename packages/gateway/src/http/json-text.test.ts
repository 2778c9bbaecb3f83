import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { HttpProblem } from "../problems/problem.js";
import { parseJsonText } from "./json-text.js";

/** The integer String(n) spells (n an integer-valued double): what JSON.stringify writes, and jsonb keeps. */
function spelt(n: number): bigint {
  const [mantissa = "", exponent = "0"] = String(n).split("e");
  const [whole = "", fraction = ""] = mantissa.split(".");
  const shift = Number(exponent) - fraction.length;
  const digits = BigInt(whole + fraction);
  return shift >= 0 ? digits * 10n ** BigInt(shift) : digits / 10n ** BigInt(-shift);
}

const refusal = (text: string): unknown => {
  try {
    parseJsonText(text);
    return undefined;
  } catch (err) {
    return err;
  }
};

describe("a JSON body's numbers (http/json-text.ts)", () => {
  it("every double, as JSON.stringify writes it, is read back as itself", () => {
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (d) => {
        expect(parseJsonText(`{"n":${JSON.stringify(d)}}`)).toEqual({ n: d === 0 ? 0 : d });
      }),
      { numRuns: 2_000 },
    );
  });

  it("an integer is refused exactly when what would be written back is another integer", () => {
    const integers = fc.oneof(
      fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }),
      // Around ±2^53, where doubles stop holding every integer.
      fc.bigInt({ min: 2n ** 53n - 64n, max: 2n ** 53n + 64n }).chain((b) => fc.constantFrom(b, -b)),
    );
    fc.assert(
      fc.property(integers, (b) => {
        const text = b.toString();
        const refused = refusal(`[${text}]`);
        const changed = spelt(Number(text)) !== b;
        expect(refused === undefined ? "kept" : "refused", text).toBe(changed ? "refused" : "kept");
        if (refused !== undefined) expect(refused).toBeInstanceOf(HttpProblem);
      }),
      { numRuns: 2_000 },
    );
  });

  it("digits in strings are not numbers, and a syntax error stays a SyntaxError", () => {
    expect(parseJsonText('["12345678901234567890", "1e999"]')).toEqual(["12345678901234567890", "1e999"]);
    expect(refusal("[12345678901234567890")).toBeInstanceOf(SyntaxError);
  });
});
