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

  it("a number is refused exactly when it reads back as another value, wherever it stands and however it is spelt", () => {
    // The oracle: the number's value as its text says and as String() of its double says, compared as
    // exact decimals (digits and a power of ten), with no prefilter: what parseJsonText must agree with.
    const exact = (text: string): string => {
      const [, sign = "", whole = "", fraction = "", exponent = "0"] = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text) ?? [];
      const digits = BigInt(whole + fraction);
      if (digits === 0n) return "0";
      let scaled = digits;
      let power = Number(exponent) - fraction.length;
      while (scaled % 10n === 0n) {
        scaled /= 10n;
        power++;
      }
      return `${sign}${scaled}e${power}`;
    };
    const spelling = fc
      .tuple(
        fc.boolean(),
        fc.stringMatching(/^(0|[1-9][0-9]{0,24})$/),
        fc.option(fc.stringMatching(/^[0-9]{1,25}$/), { nil: undefined }),
        fc.option(fc.tuple(fc.constantFrom("e", "E"), fc.constantFrom("", "+", "-"), fc.integer({ min: 0, max: 400 })), { nil: undefined }),
      )
      .map(
        ([minus, whole, fraction, e]) =>
          `${minus ? "-" : ""}${whole}${fraction === undefined ? "" : `.${fraction}`}${e === undefined ? "" : `${e[0]}${e[1]}${e[2]}`}`,
      );
    const placed = fc.tuple(spelling, fc.constantFrom("%", "[%]", '{"k": %}', "[1,%, 2]", '{"a":"x","b":\n\t%}'));
    fc.assert(
      fc.property(placed, ([number, where]) => {
        const value = Number(number);
        const changed = !Number.isFinite(value) || exact(number) !== exact(String(value));
        expect(refusal(where.replace("%", number)) === undefined ? "kept" : "refused", number).toBe(changed ? "refused" : "kept");
      }),
      { numRuns: 5_000 },
    );
  });

  it("digits in strings are not numbers, and a syntax error stays a SyntaxError", () => {
    expect(parseJsonText('["12345678901234567890", "1e999"]')).toEqual(["12345678901234567890", "1e999"]);
    expect(refusal("[12345678901234567890")).toBeInstanceOf(SyntaxError);
  });
});
