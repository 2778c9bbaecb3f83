// A JSON body's text made the value the gateway hands to a store: JSON.parse, refused (400) where it
// would hand over a number other than the one the client wrote. Everything else about the value is
// the store's own check (assertJsonValue), which sees only the parsed value and so cannot see this.
import { HttpProblem } from "../problems/problem.js";

/**
 * Where a text may hold a number a double does not carry as written: a number (after the text's start,
 * `[`, `,` or `:`) of 16 digits or more (dots between them counted), or with an exponent. A number with
 * at most 15 significant digits and no exponent always reads back as written (a double holds 15
 * decimal digits exactly, DBL_DIG), so a text without a match is parsed once, the plain way. A string
 * may match too (`"a:1e5"`), which costs only the slower parse; a hex id such as a UUID does not.
 */
const MAY_NOT_BE_EXACT = /(?:^|[[,:])\s*-?(?:\d[\d.]{15}|[\d.]*\d[eE])/;

/** A JSON number's spelling (or a double's, String(n)): sign, digits, fraction, exponent. */
const NUMBER = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;

/** The longest number a problem's detail quotes whole. */
const QUOTED = 40;

/**
 * A number's value as one spelling — sign, significant digits, exponent of the last one — equal for
 * equal values however written: 1.50e3, 1500 and 15e2 are all `15e2`, 0 and -0.0 `0`.
 */
function decimal(text: string): string | undefined {
  const m = NUMBER.exec(text);
  if (m === null) return undefined;
  const [, sign = "", whole = "", fraction = "", exponent = "0"] = m;
  const digits = (whole + fraction).replace(/^0+/, "");
  const significant = digits.replace(/0+$/, "");
  if (significant === "") return "0";
  return `${sign}${significant}e${Number(exponent) - fraction.length + digits.length - significant.length}`;
}

/**
 * JSON.parse's reviver: each number's value against its source text (what the client wrote). A
 * number whose double is another value — most integers beyond ±(2^53 − 1), more significant digits
 * than a double holds, a magnitude it cannot reach — is refused: stored, it would read back as a
 * number the client never sent (RFC 7493 §2.2: such numbers are not interoperable), with nothing to
 * tell it so.
 */
function exactly(_key: string, value: unknown, context?: { readonly source?: string }): unknown {
  const source = context?.source;
  if (typeof value !== "number" || source === undefined) return value;
  if (Number.isFinite(value) && decimal(source) === decimal(String(value))) return value;
  const quoted = source.length > QUOTED ? `${source.slice(0, QUOTED)}…` : source;
  throw new HttpProblem(
    "invalid",
    Number.isFinite(value)
      ? `body: the number ${quoted} would be stored as ${value}: a JSON number is kept as a double, which holds every integer up to ±${Number.MAX_SAFE_INTEGER} and any 15 significant digits — send a longer number as a string`
      : `body: the number ${quoted} is beyond a double's range — send it as a string`,
  );
}

/** The JSON value of `text`; throws SyntaxError where JSON.parse does, HttpProblem (400) for a number it would change. */
export function parseJsonText(text: string): unknown {
  return MAY_NOT_BE_EXACT.test(text) ? JSON.parse(text, exactly) : JSON.parse(text);
}
