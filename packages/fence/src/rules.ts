import { InvalidArgumentError } from "./errors.js";

/**
 * The one definition of a valid resource, token and holder id, used by the lock (what it grants),
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

export function assertToken(token: unknown, argument = "token"): asserts token is bigint {
  if (typeof token !== "bigint") throw new InvalidArgumentError(argument, `must be a bigint, got ${typeof token}`);
  if (token < 0n || token > MAX_TOKEN) throw new InvalidArgumentError(argument, `must be between 0 and ${MAX_TOKEN}, got ${token}`);
}

export function assertHolder(holder: unknown, argument = "holder"): asserts holder is string {
  if (typeof holder !== "string") throw new InvalidArgumentError(argument, `must be a string, got ${typeof holder}`);
  if (!HOLDER_PATTERN.test(holder)) throw new InvalidArgumentError(argument, `must be 1-${MAX_HOLDER_LENGTH} characters of A-Z a-z 0-9 . _ : -`);
}

/** Parses a token's wire form; InvalidArgumentError for anything but the one spelling of 0..2^63-1. */
export function parseToken(text: unknown, argument = "token"): bigint {
  if (typeof text !== "string" || !TOKEN_PATTERN.test(text)) throw new InvalidArgumentError(argument, "must be a decimal string: 0 or 1-19 digits without a leading zero");
  const token = BigInt(text);
  if (token > MAX_TOKEN) throw new InvalidArgumentError(argument, `must be at most ${MAX_TOKEN}`);
  return token;
}
