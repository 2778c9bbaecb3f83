import { InvalidArgumentError } from "./errors.js";

/**
 * The one definition of a valid resource, key, token and holder id, used by the lock (what it grants),
 * the stores (what they accept) and the gateway (what it parses). A lease the lock grants is always
 * one the stores can use.
 */

/** Tokens are SQL bigint / decimal strings; anything outside 0..2^63-1 cannot be compared safely. */
export const MAX_TOKEN = (1n << 63n) - 1n;
/** In UTF-16 code units, as JavaScript measures strings. */
export const MAX_RESOURCE_LENGTH = 512;
export const MAX_HOLDER_LENGTH = 128;

/**
 * A token on the wire: a decimal string, 0 or 1–19 digits without a leading zero. One spelling per
 * value (no sign, no exponent, no leading zero), so a token is compared, logged and echoed exactly.
 */
export const TOKEN_PATTERN = /^(0|[1-9][0-9]{0,18})$/;

/**
 * A holder id names the lease that presented a token. It is public (stored beside the token, logged,
 * echoed in errors), so it must never be a lease's secret value. ASCII letters, digits and `._:-`.
 */
export const HOLDER_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;

// Control characters (C0, DEL, C1) never belong in a resource or key: they break logs, headers and S3 keys.
// eslint-disable-next-line no-control-regex
export const CONTROL_CHARACTER = /[\u0000-\u001f\u007f-\u009f]/;
/** A lone surrogate cannot be encoded as UTF-8: it would not survive a header, an S3 key or a SQL text column. */
export const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Why a string is not a valid resource, or undefined if it is one. */
export function resourceProblem(resource: unknown): string | undefined {
  if (typeof resource !== "string") return `must be a string, got ${typeof resource}`;
  if (resource.length === 0) return "must not be empty";
  if (resource.length > MAX_RESOURCE_LENGTH) return `must be at most ${MAX_RESOURCE_LENGTH} characters, got ${resource.length}`;
  if (CONTROL_CHARACTER.test(resource)) return "must not contain control characters";
  if (LONE_SURROGATE.test(resource)) return "must be well-formed Unicode (no lone surrogates)";
  return undefined;
}

export function assertResource(resource: unknown, argument = "resource"): asserts resource is string {
  const problem = resourceProblem(resource);
  if (problem !== undefined) throw new InvalidArgumentError(argument, problem);
}

/**
 * At most this many resources in one lease, and fences in one write: every resource of a lease is a
 * pair of keys in one script on every node, and every fence of a write a ratchet row locked until
 * COMMIT. Sets are for the few things one operation must hold together (two accounts, an order and
 * its stock), not for bulk locking.
 */
export const MAX_RESOURCES = 64;

/**
 * Why a list is not a set of resources one lease can hold, or undefined if it is one: a non-empty
 * array of at most MAX_RESOURCES valid resources, no two the same (a lease holds a resource once;
 * a repeated name would ask one node for one key twice in one script).
 */
export function resourcesProblem(resources: unknown): { readonly at?: number; readonly problem: string } | undefined {
  if (!Array.isArray(resources)) return { problem: `must be an array of resources, got ${typeof resources}` };
  if (resources.length === 0) return { problem: "must name at least one resource" };
  if (resources.length > MAX_RESOURCES) return { problem: `must name at most ${MAX_RESOURCES} resources, got ${resources.length}` };
  const seen = new Set<string>();
  for (let at = 0; at < resources.length; at++) {
    const resource: unknown = resources[at];
    const problem = resourceProblem(resource);
    if (problem !== undefined) return { at, problem };
    if (seen.has(resource as string)) return { at, problem: `repeats ${JSON.stringify(resource)}: a lease holds each resource once` };
    seen.add(resource as string);
  }
  return undefined;
}

/** A set of resources for one lease (resourcesProblem), copied; InvalidArgumentError naming the element at fault. */
export function checkResources(resources: unknown, argument = "resources"): string[] {
  const found = resourcesProblem(resources);
  if (found !== undefined) throw new InvalidArgumentError(found.at === undefined ? argument : `${argument}[${found.at}]`, found.problem);
  return [...(resources as string[])];
}

/**
 * A key's first segment (between '/'s, or at either end) that is empty, "." or "..", that text
 * captured. One regular expression rather than a split: a write checks its key twice.
 */
const BAD_SEGMENT = /(?:^|\/)(\.{0,2})(?:\/|$)/;

/** In UTF-8 bytes, as PostgreSQL and S3 store a key. */
export const MAX_KEY_LENGTH = 512;

/**
 * Why a string is not a valid key (the name of a record or an object in a store), or undefined if
 * it is one. Both stores check it before any I/O, and the gateway for the key in a path.
 *
 * Invariant: no two distinct valid keys ever map to one stored object.
 * - A valid key is well-formed UTF-16 (no lone surrogate), so its UTF-8 encoding is injective: two
 *   distinct keys are two distinct byte strings. A lone surrogate has no UTF-8 encoding: PostgreSQL
 *   would store "a\uD800", "a\uDC00" and "a\uFFFD" all as "a\uFFFD", and S3 could not name it.
 * - PostgreSQL: `key` is a text primary key, and under a deterministic collation (the default) two
 *   texts are equal only if their bytes are.
 * - S3: an object's name is bytes, and the store's layout (s3-layout.ts) is injective: a key follows a
 *   fixed folder verbatim, and what follows it in a data object's name has no '/'.
 * No key is normalised anywhere (Unicode, case, or path): "é" and "e\u0301" are two keys.
 *
 * Besides, a key never addresses anything outside its prefix (no leading '/', no empty or '.'/'..'
 * segments), and has no control characters (they break logs, headers and S3 names).
 */
export function keyProblem(key: unknown): string | undefined {
  if (typeof key !== "string") return `must be a string, got ${typeof key}`;
  if (key.length === 0) return "must not be empty";
  if (Buffer.byteLength(key, "utf8") > MAX_KEY_LENGTH) return `must be at most ${MAX_KEY_LENGTH} bytes`;
  if (CONTROL_CHARACTER.test(key)) return "must not contain control characters";
  // What the invariant rests on: only well-formed strings have distinct UTF-8 encodings.
  if (LONE_SURROGATE.test(key)) return "must be well-formed Unicode (no lone surrogates)";
  if (key.startsWith("/")) return "must not start with '/'";
  const segment = BAD_SEGMENT.exec(key);
  if (segment === null) return undefined;
  return segment[1] === "" ? "must not contain empty segments ('//' or a trailing '/')" : "must not contain '.' or '..' segments";
}

export function assertKey(key: unknown, argument = "key"): asserts key is string {
  const problem = keyProblem(key);
  if (problem !== undefined) throw new InvalidArgumentError(argument, problem);
}

export function assertToken(token: unknown, argument = "token"): asserts token is bigint {
  if (typeof token !== "bigint") throw new InvalidArgumentError(argument, `must be a bigint, got ${typeof token}`);
  if (token < 0n || token > MAX_TOKEN) throw new InvalidArgumentError(argument, `must be between 0 and ${MAX_TOKEN}, got ${token}`);
}

export function assertHolder(holder: unknown, argument = "holder"): asserts holder is string {
  if (typeof holder !== "string") throw new InvalidArgumentError(argument, `must be a string, got ${typeof holder}`);
  if (!HOLDER_PATTERN.test(holder))
    throw new InvalidArgumentError(argument, `must be 1-${MAX_HOLDER_LENGTH} characters of A-Z a-z 0-9 . _ : -`);
}

/** Parses a token's wire form; InvalidArgumentError for anything but the one spelling of 0..2^63-1. */
export function parseToken(text: unknown, argument = "token"): bigint {
  if (typeof text !== "string" || !TOKEN_PATTERN.test(text))
    throw new InvalidArgumentError(argument, "must be a decimal string: 0 or 1-19 digits without a leading zero");
  const token = BigInt(text);
  if (token > MAX_TOKEN) throw new InvalidArgumentError(argument, `must be at most ${MAX_TOKEN}`);
  return token;
}
