// Pins the one definition of a valid resource, key, token, holder and set of fences (rules.ts,
// fence.ts) as properties over generated values: every invalid one is refused with
// InvalidArgumentError naming the argument at fault, before anything else happens; every valid one
// passes unchanged; and admits() is a ratchet — what it admits never lets a lower token back in.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "./errors.js";
import { admits, checkFence, checkFences, type CheckedFence } from "./fence.js";
import {
  assertHolder,
  assertKey,
  assertResource,
  assertToken,
  checkResources,
  CONTROL_CHARACTER,
  keyProblem,
  MAX_HOLDER_LENGTH,
  MAX_KEY_LENGTH,
  MAX_RESOURCE_LENGTH,
  MAX_RESOURCES,
  MAX_TOKEN,
  parseToken,
  resourceProblem,
} from "./rules.js";

/** The error a check threw, or undefined. */
function thrown(check: () => unknown): unknown {
  try {
    check();
  } catch (err) {
    return err;
  }
  return undefined;
}
const refusedAs = (argument: string, check: () => unknown): void => {
  const err = thrown(check);
  expect(err).toBeInstanceOf(InvalidArgumentError);
  expect((err as InvalidArgumentError).argument).toBe(argument);
};

const notString = fc.anything().filter((v) => typeof v !== "string");
const control = fc
  .integer({ min: 0, max: 0x9f })
  .filter((c) => c < 0x20 || c >= 0x7f)
  .map((c) => String.fromCharCode(c));
const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c));
/** Surroundings without a control character: what is inserted decides. */
const text = fc.string({ unit: "grapheme", maxLength: 20 }).filter((s) => !CONTROL_CHARACTER.test(s));
/** `inserted` put anywhere in `around`. */
const anywhere = (inserted: fc.Arbitrary<string>): fc.Arbitrary<string> =>
  fc
    .tuple(text, inserted, fc.nat())
    .map(([around, bad, at]) => around.slice(0, at % (around.length + 1)) + bad + around.slice(at % (around.length + 1)));

const validResource = fc.string({ unit: "grapheme", minLength: 1, maxLength: 40 }).filter((r) => resourceProblem(r) === undefined);
const validHolder = fc.stringMatching(/^[A-Za-z0-9._:-]{1,40}$/);
const token = fc.bigInt({ min: 0n, max: MAX_TOKEN });

describe("a resource", () => {
  it("anything but a string is refused", () => {
    fc.assert(fc.property(notString, (v) => refusedAs("resource", () => assertResource(v))));
  });

  it("a control character anywhere in it is refused, whatever surrounds it", () => {
    fc.assert(fc.property(anywhere(control), (r) => refusedAs("r", () => assertResource(r, "r"))));
  });

  it("a lone surrogate anywhere in it is refused; a surrogate pair (one emoji) is not", () => {
    fc.assert(
      fc.property(anywhere(loneSurrogate), (r) => {
        // Inserted into well-formed text, one half never pairs up: it, or the half it split from its pair, is alone.
        expect(resourceProblem(r)).toBe("must be well-formed Unicode (no lone surrogates)");
      }),
    );
    expect(resourceProblem("\uD83D\uDE00")).toBeUndefined();
  });

  it(`${MAX_RESOURCE_LENGTH} UTF-16 units pass, one more is refused`, () => {
    fc.assert(
      fc.property(fc.constantFrom("x", "é", "😀"), (c) => {
        const at = c.repeat(Math.floor(MAX_RESOURCE_LENGTH / c.length));
        expect(resourceProblem(at)).toBeUndefined();
        expect(resourceProblem(at + "x".repeat(MAX_RESOURCE_LENGTH - at.length + 1))).toMatch(/at most/);
      }),
    );
  });
});

describe("a key", () => {
  const segment = fc.string({ unit: "grapheme", minLength: 1, maxLength: 8 }).filter((s) => !s.includes("/") && s !== "." && s !== "..");
  const validKey = fc
    .array(segment, { minLength: 1, maxLength: 5 })
    .map((s) => s.join("/"))
    .filter((k) => keyProblem(k) === undefined);

  it("any path of segments without '/', '.' or '..' passes, and so does its NFD form: no key is normalised, both are keys", () => {
    fc.assert(
      fc.property(fc.array(segment, { minLength: 1, maxLength: 5 }), (parts) => {
        const k = parts.join("/");
        fc.pre(Buffer.byteLength(k.normalize("NFD")) <= MAX_KEY_LENGTH && !CONTROL_CHARACTER.test(k));
        expect(keyProblem(k)).toBeUndefined();
        expect(keyProblem(k.normalize("NFD"))).toBeUndefined();
      }),
    );
  });

  it("an empty, '.' or '..' segment anywhere, or a leading '/', is refused", () => {
    fc.assert(
      fc.property(validKey, fc.constantFrom("", ".", ".."), fc.nat(), (k, bad, at) => {
        const parts = k.split("/");
        parts.splice(at % (parts.length + 1), 0, bad);
        const withBad = parts.join("/");
        refusedAs("key", () => assertKey(withBad));
        refusedAs("key", () => assertKey(`/${k}`));
      }),
    );
  });

  it("names the first bad segment's problem, as reading the segments in order would", () => {
    // The definition keyProblem's one regular expression stands for.
    const bySegments = (key: string): string | undefined => {
      for (const segment of key.split("/")) {
        if (segment === "") return "must not contain empty segments ('//' or a trailing '/')";
        if (segment === "." || segment === "..") return "must not contain '.' or '..' segments";
      }
      return undefined;
    };
    const part = fc.constantFrom("", ".", "..", "...", ".a", "a.", "a", "é");
    fc.assert(
      fc.property(fc.array(part, { minLength: 1, maxLength: 6 }), (parts) => {
        const key = parts.join("/");
        fc.pre(key !== "" && !key.startsWith("/"));
        expect(keyProblem(key)).toBe(bySegments(key));
      }),
    );
  });

  it(`is measured in UTF-8 bytes: ${MAX_KEY_LENGTH} pass, one more is refused, however many characters that is`, () => {
    fc.assert(
      fc.property(fc.constantFrom("a", "é", "€", "😀"), (c) => {
        const bytes = Buffer.byteLength(c);
        const at = c.repeat(Math.floor(MAX_KEY_LENGTH / bytes)) + "a".repeat(MAX_KEY_LENGTH % bytes);
        expect(Buffer.byteLength(at)).toBe(MAX_KEY_LENGTH);
        expect(keyProblem(at)).toBeUndefined();
        expect(keyProblem(at + "a")).toBe(`must be at most ${MAX_KEY_LENGTH} bytes`);
      }),
    );
  });

  it("a control character or a lone surrogate anywhere is refused", () => {
    fc.assert(fc.property(anywhere(control), (k) => refusedAs("key", () => assertKey(`k${k}`))));
    expect(keyProblem("a\uDBFFb")).toMatch(/well-formed/);
  });
});

describe("a token", () => {
  it("any bigint in 0..2^63-1 passes; any outside, or any number, string or other type, is refused", () => {
    fc.assert(
      fc.property(token, (t) => {
        expect(() => assertToken(t)).not.toThrow();
      }),
    );
    fc.assert(
      fc.property(fc.oneof(fc.bigInt({ max: -1n }), fc.bigInt({ min: MAX_TOKEN + 1n })), (t) => refusedAs("token", () => assertToken(t))),
    );
    fc.assert(
      fc.property(
        fc.anything().filter((v) => typeof v !== "bigint"),
        (v) => refusedAs("t", () => assertToken(v, "t")),
      ),
    );
  });

  it("its wire form has one spelling: a leading zero, a sign, spaces or a fraction are refused for every value", () => {
    fc.assert(
      fc.property(
        token,
        fc.constantFrom(
          (s: string) => `0${s}`,
          (s: string) => `+${s}`,
          (s: string) => ` ${s}`,
          (s: string) => `${s}.0`,
          (s: string) => `${s}n`,
        ),
        (t, spell) => {
          refusedAs("token", () => parseToken(spell(t.toString())));
          expect(parseToken(t.toString())).toBe(t);
        },
      ),
    );
  });
});

describe("a holder", () => {
  it(`1-${MAX_HOLDER_LENGTH} characters of A-Z a-z 0-9 . _ : - pass; any other character anywhere is refused`, () => {
    fc.assert(
      fc.property(validHolder, (h) => {
        expect(() => assertHolder(h)).not.toThrow();
      }),
    );
    const other = fc.string({ unit: "grapheme", minLength: 1, maxLength: 1 }).filter((c) => !/^[A-Za-z0-9._:-]$/.test(c));
    fc.assert(
      fc.property(validHolder, other, fc.nat(), (h, c, at) =>
        refusedAs("holder", () => assertHolder(h.slice(0, at % h.length) + c + h.slice(at % h.length))),
      ),
    );
    refusedAs("holder", () => assertHolder("h".repeat(MAX_HOLDER_LENGTH + 1)));
    refusedAs("holder", () => assertHolder(""));
  });
});

describe("a set of resources, and of fences", () => {
  it("a repeated resource is refused at the index of its second occurrence", () => {
    fc.assert(
      fc.property(fc.uniqueArray(validResource, { minLength: 1, maxLength: 10 }), fc.nat(), fc.nat(), (set, from, to) => {
        const repeated = set[from % set.length] as string;
        const list = [...set];
        const at = to % (list.length + 1);
        list.splice(at, 0, repeated);
        const second = list.indexOf(repeated, list.indexOf(repeated) + 1);
        refusedAs(`resources[${second}]`, () => checkResources(list));
      }),
    );
  });

  it(`${MAX_RESOURCES} resources or fences pass, one more is refused; none at all is refused`, () => {
    const names = Array.from({ length: MAX_RESOURCES + 1 }, (_, i) => `r${i}`);
    expect(checkResources(names.slice(0, MAX_RESOURCES))).toHaveLength(MAX_RESOURCES);
    refusedAs("resources", () => checkResources(names));
    refusedAs("resources", () => checkResources([]));
    const fences = names.map((resource) => ({ resource, token: 1n }));
    expect(checkFences(fences.slice(0, MAX_RESOURCES))).toHaveLength(MAX_RESOURCES);
    refusedAs("fences", () => checkFences(fences));
    refusedAs("fences", () => checkFences([]));
  });

  it("a fence with any one field invalid is refused naming that field; its index when in a set", () => {
    const good = { resource: "r", token: 1n, holder: "h" };
    const bad: [string, Record<string, unknown>][] = [
      ["resource", { ...good, resource: "" }],
      ["token", { ...good, token: -1n }],
      ["token", { ...good, token: 1 }],
      ["holder", { ...good, holder: "a b" }],
    ];
    for (const [field, fence] of bad) {
      refusedAs(`fence.${field}`, () => checkFence(fence));
      refusedAs(`fences[1].${field}`, () => checkFences([{ resource: "other", token: 1n }, fence]));
    }
    refusedAs("fences[1].resource", () => checkFences([good, { ...good, token: 2n }]));
    // A lease's fences, taken whole: the path names them as the lease's.
    refusedAs("fences.fences[0].token", () => checkFences({ fences: [{ resource: "r", token: "1" }] }));
  });
});

describe("admits: the ratchet", () => {
  const fence = fc.record({
    resource: fc.constant("r"),
    token: fc.bigInt({ min: 0n, max: 6n }),
    holder: fc.option(fc.constantFrom("a", "b"), { nil: null }),
  });

  it("a store that keeps the highest fence it admitted never admits a lower token, nor an equal one from another holder, after it", () => {
    fc.assert(
      fc.property(fc.array(fence, { maxLength: 30 }), (incoming: CheckedFence[]) => {
        let highest: { token: bigint; holder: string | null } | undefined;
        for (const f of incoming) {
          if (highest !== undefined && !admits(highest, f)) {
            expect(f.token < highest.token || (f.token === highest.token && f.holder !== highest.holder)).toBe(true);
            continue;
          }
          if (highest !== undefined) expect(f.token >= highest.token).toBe(true);
          highest = { token: f.token, holder: f.holder };
        }
      }),
    );
  });

  it("a fence always admits itself again (a holder retries its own write), and every higher token is admitted", () => {
    fc.assert(
      fc.property(fence, fc.bigInt({ min: 1n, max: 5n }), fc.option(fc.constantFrom("a", "b"), { nil: null }), (f, up, other) => {
        expect(admits({ token: f.token, holder: f.holder }, f)).toBe(true);
        expect(admits({ token: f.token, holder: f.holder }, { ...f, token: f.token + up, holder: other })).toBe(true);
        if (f.token > 0n) expect(admits({ token: f.token, holder: f.holder }, { ...f, token: f.token - 1n })).toBe(false);
      }),
    );
  });
});
