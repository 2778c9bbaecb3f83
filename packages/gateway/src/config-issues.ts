import { z } from "zod";
import { SETTINGS, flagNames, type Raw } from "./settings.js";

/**
 * How the configuration's problems are said: the one place that words them, for the gateway and its
 * sweep alike (config.ts parses through configIssues). zod's own wording ("Invalid input: expected
 * array, received undefined") becomes "missing apiKeys", "port must be an integer", each followed by
 * where the value came from — the flag, the variable or the config file — or, when it is missing,
 * where it can be given. A message a schema words itself ("at least one API key is needed …") is kept,
 * after the field's name. Values are never repeated: a variable or the file may hold a secret.
 */

/** The configuration could not be read or is not valid: its message is one line naming each problem. */
export class ConfigurationError extends Error {
  override readonly name = "ConfigurationError";
}

/** What each source gave, before merging: the file (and its path), the environment, the flags. */
export interface ConfigSources {
  readonly file?: { readonly path: string; readonly raw: Raw };
  readonly env: Raw;
  readonly flags: Raw;
}

type Path = readonly PropertyKey[];

/** `apiKeys[1].id`: array items in brackets, as the config file's fields are written (`apiKeys[].id`). */
function fieldName(path: Path): string {
  return path.reduce<string>((name, part) => {
    if (typeof part === "number") return `${name}[${part}]`;
    return name === "" ? String(part) : `${name}.${String(part)}`;
  }, "");
}

/** The value at `path` in a source, or undefined. */
function at(raw: unknown, path: Path): unknown {
  let node = raw;
  for (const part of path) {
    if (typeof node !== "object" || node === null) return undefined;
    node = (node as Record<PropertyKey, unknown>)[part];
  }
  return node;
}

/** The setting (settings.ts) that gives the value at `path` or the list it is inside (`apiKeys` for apiKeys[1].id). */
function settingOf(path: Path): (typeof SETTINGS)[number] | undefined {
  const named = path.filter((p): p is string => typeof p === "string");
  for (let n = named.length; n > 0; n--) {
    const setting = SETTINGS.find((s) => s.path === named.slice(0, n).join("."));
    if (setting !== undefined) return setting;
  }
  return undefined;
}

/** Where the value at `path` came from, the sources in the order they win: flags, environment, file. */
function origin(path: Path, sources: ConfigSources): string | undefined {
  if (path.length === 0) return sources.file?.path;
  const setting = settingOf(path);
  if (at(sources.flags, path) !== undefined && setting?.flag !== undefined) return flagNames(setting.flag).long;
  if (at(sources.env, path) !== undefined && setting?.variable !== undefined) return setting.variable;
  if (sources.file !== undefined && at(sources.file.raw, path) !== undefined) return sources.file.path;
  return undefined;
}

/** Where a missing value can be given: its flag and variable, or the config file, or the list it belongs to. */
function whereToGive(path: Path, sources: ConfigSources): string {
  const field = path.join(".");
  const setting = SETTINGS.find((s) => s.path === field);
  if (setting !== undefined) {
    const ways = [setting.flag === undefined ? undefined : flagNames(setting.flag).long, setting.variable, `${field} in the config file`];
    return `: give ${ways.filter((w) => w !== undefined).join(", or ")}`;
  }
  const parent = path.length > 1 ? origin(path.slice(0, -1), sources) : undefined;
  return parent === undefined ? " (in the config file)" : ` (in ${parent})`;
}

const KINDS: Readonly<Record<string, string>> = {
  number: "a number",
  int: "an integer",
  string: "a text",
  boolean: "true or false",
  array: "a list (a JSON array)",
  object: "an object",
};

function kindOf(value: unknown): string {
  if (Array.isArray(value)) return "a list";
  if (value === null) return "null";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

function atLeast(origin: string, limit: number | bigint, inclusive: boolean | undefined, bound: "at least" | "at most"): string {
  const n = Number(limit);
  if (origin === "array")
    return bound === "at least" && n === 1 ? "must not be empty" : `must have ${bound} ${n} item${n === 1 ? "" : "s"}`;
  if (origin === "string")
    return bound === "at least" && n === 1 ? "must not be empty" : `must be ${bound} ${n} character${n === 1 ? "" : "s"}`;
  if (inclusive === false) return `must be ${bound === "at least" ? "more" : "less"} than ${n}`;
  return `must be ${bound} ${n}`;
}

/** What wording an issue needs besides the issue: where each value came from, and every field's name. */
interface Context {
  readonly sources: ConfigSources;
  readonly knownFields: readonly string[];
}

/** ` (from --port)`: where the value at `path` came from, or nothing when no source gave it. */
function from(path: Path, sources: ConfigSources): string {
  const source = origin(path, sources);
  return source === undefined ? "" : ` (from ${source})`;
}

/**
 * The line of an issue no schema worded: "missing X: give …", "X must be … (from …)", "unknown field
 * X (from …): …"; undefined for an issue of another kind (zod's wording stays).
 */
function reworded(issue: z.core.$ZodRawIssue, { sources, knownFields }: Context): string | undefined {
  const path = issue.path ?? [];
  const name = fieldName(path);
  switch (issue.code) {
    case "invalid_type":
      if (issue.input === undefined) return `missing ${name}${whereToGive(path, sources)}`;
      return `${name} must be ${KINDS[issue.expected] ?? issue.expected}, not ${kindOf(issue.input)}${from(path, sources)}`;
    case "too_small":
      return `${name} ${atLeast(issue.origin, issue.minimum, issue.inclusive, "at least")}${from(path, sources)}`;
    case "too_big":
      return `${name} ${atLeast(issue.origin, issue.maximum, issue.inclusive, "at most")}${from(path, sources)}`;
    case "invalid_value": {
      const values = issue.values.map((v) => String(v)).join(", ");
      return `${name} must be ${issue.values.length === 1 ? "" : "one of "}${values}${from(path, sources)}`;
    }
    case "invalid_format":
      return `${name} must be ${issue.format === "url" ? "a URL" : `a valid ${issue.format}`}${from(path, sources)}`;
    case "unrecognized_keys": {
      const section = path.map((p) => (typeof p === "number" ? "[]" : String(p))).join(".");
      const prefix = section === "" ? "" : `${section}.`.replace(".[].", "[].");
      const known = [...new Set(knownFields.filter((f) => f.startsWith(prefix)).map((f) => f.slice(prefix.length).split(/[.[]/)[0]))];
      const unknown = issue.keys.map((k) => (name === "" ? k : `${name}.${k}`));
      const fields = `the fields${name === "" ? "" : ` of ${name}`} are ${known.join(", ")}`;
      return `unknown field${unknown.length === 1 ? "" : "s"} ${unknown.join(", ")}${from(path, sources)}: ${fields}`;
    }
    default:
      return undefined;
  }
}

/**
 * Parses `raw` with `schema`; throws ConfigurationError with every problem on one line, each named
 * as above (knownFields: every field's dotted path, for naming what an unknown field could have been).
 */
export function configIssues<S extends z.ZodType>(
  schema: S,
  raw: Raw,
  sources: ConfigSources,
  knownFields: readonly string[],
): z.output<S> {
  // The lines worded here, told apart from the messages a schema worded itself (which get the field's name in front).
  const ours = new Set<string>();
  const result = schema.safeParse(raw, {
    error: (issue) => {
      const line = reworded(issue, { sources, knownFields });
      if (line !== undefined) ours.add(line);
      return line;
    },
  });
  if (result.success) return result.data;
  const lines = result.error.issues.map((issue) => {
    if (ours.has(issue.message)) return issue.message;
    const name = fieldName(issue.path);
    return `${name === "" ? "configuration" : name}: ${issue.message}${from(issue.path, sources)}`;
  });
  throw new ConfigurationError(lines.join("; "));
}
