import { InvalidArgumentError } from "@fenced/fence";

/** What a record's value may be: exactly what survives JSON → jsonb → JSON unchanged. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** Deeper values are refused up front rather than failing halfway through the validator or the server. */
const MAX_JSON_DEPTH = 256;

// jsonb cannot store U+0000 and rejects unpaired surrogates, so such strings would fail on the server, after I/O.
// eslint-disable-next-line no-control-regex
const NUL = /\u0000/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function assertStorableString(s: string, path: string): void {
  if (NUL.test(s)) throw new InvalidArgumentError(path, "strings containing U+0000 cannot be stored as jsonb");
  if (LONE_SURROGATE.test(s)) throw new InvalidArgumentError(path, "strings with unpaired UTF-16 surrogates are not valid JSON text");
}

/**
 * Throws InvalidArgumentError (argument: the path to the offending part, e.g. "value.items[2]")
 * unless `value` round-trips through JSON exactly.
 * JSON.stringify would silently drop undefined and functions, turn NaN into null and Dates into
 * strings; a value that reads back different from what was written is refused instead.
 */
export function assertJsonValue(value: unknown, path = "value"): asserts value is JsonValue {
  walk(value, path, new Set(), 0);
}

function walk(value: unknown, path: string, ancestors: Set<object>, depth: number): void {
  switch (typeof value) {
    case "boolean":
      return;
    case "string":
      assertStorableString(value, path);
      return;
    case "number":
      if (!Number.isFinite(value)) throw new InvalidArgumentError(path, `${value} is not representable in JSON`);
      return;
    case "object":
      break;
    default:
      // undefined, function, symbol, bigint
      throw new InvalidArgumentError(path, `a ${typeof value} is not JSON-serialisable`);
  }
  if (value === null) return;
  if (depth >= MAX_JSON_DEPTH) throw new InvalidArgumentError(path, `nested deeper than ${MAX_JSON_DEPTH} levels`);
  if (ancestors.has(value)) throw new InvalidArgumentError(path, "circular reference");
  ancestors.add(value);
  if (Array.isArray(value)) {
    // Index loop, not forEach: holes must be seen (JSON would write them as null).
    for (let i = 0; i < value.length; i++) walk(value[i], `${path}[${i}]`, ancestors, depth + 1);
  } else {
    const proto: unknown = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) {
      const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
      throw new InvalidArgumentError(
        path,
        `only plain objects and arrays are stored (got ${typeof name === "string" ? name : "a non-plain object"})`,
      );
    }
    if (Object.getOwnPropertySymbols(value).length > 0)
      throw new InvalidArgumentError(path, "symbol-keyed properties are not JSON-serialisable");
    for (const [key, child] of Object.entries(value)) {
      assertStorableString(key, `${path} key ${JSON.stringify(key)}`);
      walk(child, `${path}.${key}`, ancestors, depth + 1);
    }
  }
  ancestors.delete(value);
}
