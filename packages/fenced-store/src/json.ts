import { InvalidArgumentError } from "@fenced/fence";
import { LONE_SURROGATE } from "@fenced/fence/internal";

/** What a record's value may be: exactly what survives JSON → jsonb → JSON unchanged. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** Deeper values are refused up front rather than failing halfway through the validator or the server. */
const MAX_JSON_DEPTH = 256;

// jsonb cannot store U+0000 and rejects unpaired surrogates (@fenced/fence's LONE_SURROGATE), so such
// strings would fail on the server, after I/O.
// eslint-disable-next-line no-control-regex
const NUL = /\u0000/;

/** Why a string cannot be stored as jsonb, or undefined. */
function stringProblem(s: string): string | undefined {
  if (NUL.test(s)) return "strings containing U+0000 cannot be stored as jsonb";
  if (LONE_SURROGATE.test(s)) return "strings with unpaired UTF-16 surrogates are not valid JSON text";
  return undefined;
}

/**
 * What walk() throws: the problem, and the path to it from the inside out, one segment added by each
 * level it leaves (`[2]`, `.items`). A valid value, the common case, builds no path at all. Never
 * thrown to a caller: assertJsonValue makes it an InvalidArgumentError.
 */
class Refused extends Error {
  override readonly name = "Refused";
  readonly inside: string[] = [];
  constructor(readonly problem: string) {
    super(problem);
  }
}

/** `err`, with `segment` added to its path when it is a Refused: for a walk() level's catch to rethrow. */
function leaving(err: unknown, segment: () => string): unknown {
  if (err instanceof Refused) err.inside.push(segment());
  return err;
}

/**
 * Throws InvalidArgumentError (argument: the path to the offending part, e.g. "value.items[2]")
 * unless `value` round-trips through JSON exactly.
 * JSON.stringify would silently drop undefined and functions, turn NaN into null and Dates into
 * strings; a value that reads back different from what was written is refused instead.
 */
export function assertJsonValue(value: unknown, path = "value"): asserts value is JsonValue {
  try {
    walk(value, new Set(), 0);
  } catch (err) {
    if (err instanceof Refused) throw new InvalidArgumentError(path + err.inside.reverse().join(""), err.problem);
    throw err;
  }
}

function walk(value: unknown, ancestors: Set<object>, depth: number): void {
  switch (typeof value) {
    case "boolean":
      return;
    case "string": {
      const problem = stringProblem(value);
      if (problem !== undefined) throw new Refused(problem);
      return;
    }
    case "number":
      if (!Number.isFinite(value)) throw new Refused(`${value} is not representable in JSON`);
      return;
    case "object":
      break;
    default:
      // undefined, function, symbol, bigint
      throw new Refused(`a ${typeof value} is not JSON-serialisable`);
  }
  if (value === null) return;
  if (depth >= MAX_JSON_DEPTH) throw new Refused(`nested deeper than ${MAX_JSON_DEPTH} levels`);
  if (ancestors.has(value)) throw new Refused("circular reference");
  const array = Array.isArray(value);
  const proto: unknown = Object.getPrototypeOf(value);
  if (array ? proto !== Array.prototype : proto !== Object.prototype && proto !== null) {
    const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
    throw new Refused(`only plain objects and arrays are stored (got ${typeof name === "string" ? name : "a non-plain object"})`);
  }
  // JSON.stringify calls a toJSON it finds on the value, own or not, enumerable or not, and writes what
  // it returns instead (undefined: no value at all). Data under the key "toJSON" is not a function.
  if (typeof (value as { toJSON?: unknown }).toJSON === "function") throw new Refused("a toJSON method would be written in its place");
  ancestors.add(value);
  if (array) {
    // Index loop, not forEach: holes must be seen (JSON would write them as null).
    let i = 0;
    try {
      for (; i < value.length; i++) walk(value[i], ancestors, depth + 1);
    } catch (err) {
      throw leaving(err, () => `[${i}]`);
    }
  } else {
    if (Object.getOwnPropertySymbols(value).length > 0) throw new Refused("symbol-keyed properties are not JSON-serialisable");
    // Own enumerable string keys, as JSON.stringify writes them (Object.keys, never for…in).
    for (const key of Object.keys(value)) {
      const problem = stringProblem(key);
      if (problem !== undefined) throw leaving(new Refused(problem), () => ` key ${JSON.stringify(key)}`);
      try {
        walk((value as Record<string, unknown>)[key], ancestors, depth + 1);
      } catch (err) {
        throw leaving(err, () => `.${key}`);
      }
    }
  }
  ancestors.delete(value);
}
