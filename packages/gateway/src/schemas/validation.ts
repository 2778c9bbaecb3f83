import type { Request } from "express";
import { z } from "zod";
import { MAX_RESOURCES, MAX_TOKEN, type Fence } from "@fenced/fence";
import { HOLDER_PATTERN, keyProblem, resourceProblem, resourcesProblem, TOKEN_PATTERN } from "@fenced/fence/internal";
import { MIN_TTL_MS } from "@fenced/lock/internal";
import { leaseBytesProblem, MAX_LEASE_RESOURCE_BYTES } from "../auth/lease-id.js";
import { HttpProblem } from "../problems/problem.js";
import { resourceSchema } from "../vocabulary/fields.js";

/**
 * Tokens travel as decimal strings, never JSON numbers: a double holds 53 bits, a token 63. The
 * pattern (one spelling per value) is @fenced/fence's, the one definition shared with the lock and
 * the stores.
 */
export const tokenSchema = z
  .string()
  .regex(TOKEN_PATTERN, "a token is a decimal string: 0 or 1-19 digits without a leading zero")
  // zod runs every check even after one failed: BigInt() must only ever see the pattern's digits.
  .refine((s) => !TOKEN_PATTERN.test(s) || BigInt(s) <= MAX_TOKEN, `a token is at most ${MAX_TOKEN}`)
  .transform((s) => BigInt(s));

/**
 * The resources of one lease (`resources` in POST /v1/leases): @fenced/fence's rule for a set — 1 to
 * MAX_RESOURCES valid resources, none repeated — and the gateway's bound on their total length, which
 * keeps the lease id within what a sealed string may be (auth/lease-id.ts).
 */
const resourcesSchema = z
  .array(resourceSchema)
  .superRefine((resources, ctx) => {
    // Each resource's own problem is reported by its element's schema, at its index.
    if (resources.some((r) => resourceProblem(r) !== undefined)) return;
    const found = resourcesProblem(resources);
    if (found !== undefined) {
      ctx.addIssue({ code: "custom", path: found.at === undefined ? [] : [found.at], message: `resources ${found.problem}` });
      return;
    }
    const tooLong = leaseBytesProblem(resources);
    if (tooLong !== undefined) ctx.addIssue({ code: "custom", message: `resources ${tooLong}` });
  })
  // The rule in the API document's JSON Schema, which cannot count bytes: the description says it.
  .meta({
    description: `The resources of one lease, acquired all or none, in the order their fences are answered: 1-${MAX_RESOURCES}, none repeated, together at most ${MAX_LEASE_RESOURCE_BYTES} bytes of UTF-8`,
    minItems: 1,
    maxItems: MAX_RESOURCES,
    uniqueItems: true,
  });

/** A lease request, whichever of `resource` and `resources` it named: the resources in order. */
export interface LeaseGrant {
  readonly resources: readonly string[];
  readonly ttlMs: number;
  readonly register: boolean;
}

export function leaseBodySchema(maxTtlMs: number) {
  // The lock's floor (@fenced/lock MIN_TTL_MS): a shorter lease would run out before its holder could use it.
  const ttlMs = z.number().int().min(MIN_TTL_MS).max(maxTtlMs).describe("Milliseconds");
  const register = z.boolean().default(false);
  // Its shape is checked by decodeLeaseId; here only its type and a bound on its length.
  const leaseId = z.string().max(4096);
  const one = z.strictObject({ resource: resourceSchema, ttlMs, register }).describe("A lease of one resource");
  const set = z
    .strictObject({ resources: resourcesSchema, ttlMs, register })
    .describe("A lease of several resources, one token (and one credential) per resource");
  return {
    /** The request body as the API document states it: exactly one of `resource` and `resources`. */
    create: z.xor([one, set]),
    /**
     * The same rule as `create`, with the explanation a client needs: which of the two the body
     * meant is read from its fields, so that a bad resource is named, not "no option matched".
     */
    grant(body: unknown): LeaseGrant {
      const fields = typeof body === "object" && body !== null && !Array.isArray(body) ? Object.keys(body) : [];
      if (fields.includes("resource") && fields.includes("resources"))
        throw invalid("give resource (one) or resources (several), not both", "resources");
      if (fields.includes("resources")) return set.parse(body);
      if (typeof body === "object" && body !== null && !Array.isArray(body) && !fields.includes("resource"))
        throw invalid("give resource (one resource) or resources (several, acquired together)", "resource");
      const parsed = one.parse(body);
      return { resources: [parsed.resource], ttlMs: parsed.ttlMs, register: parsed.register };
    },
    extend: z.strictObject({ leaseId, ttlMs }),
    release: z.strictObject({ leaseId }),
  };
}

function invalid(message: string, where: string): HttpProblem {
  return new HttpProblem("invalid", `${where}: ${message}`, { errors: [{ path: where, message }] });
}

/**
 * The key is the raw path after the route's prefix, percent-decoded once. Parsing it here rather
 * than with a route parameter keeps one rule for '%2F' and '/' (both are a '/'), and the key rule
 * (@fenced/fence's keyProblem, the stores' own) then refuses '.'/'..' segments, empty segments,
 * control characters and lone surrogates in whatever form they arrived.
 */
export function keyFromPath(rawPath: string): string {
  let key: string;
  try {
    key = decodeURIComponent(rawPath.startsWith("/") ? rawPath.slice(1) : rawPath);
  } catch {
    // An encoded surrogate (%ED%A0%80) is not UTF-8, so it ends here, refused like the key rule would.
    throw invalid("not valid percent-encoded UTF-8", "key");
  }
  const problem = keyProblem(key);
  if (problem !== undefined) throw invalid(`a key ${problem}`, "key");
  return key;
}

function single(req: Request, name: string): string | undefined {
  const value = req.headers[name];
  // Node joins repeated unknown headers with ", ", which no valid value contains; arrays come from set-cookie-like headers only.
  return Array.isArray(value) ? value.join(", ") : value;
}

/**
 * Header values carry bytes, not Unicode: a resource travels percent-encoded (UTF-8), like the key
 * in the path, and '%' itself as %25.
 */
export function decodeHeaderText(value: string, where: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    throw invalid("not valid percent-encoded UTF-8", where);
  }
}

/** Percent-encodes what a header value cannot carry as is (and '%', so that decoding is exact). */
export function encodeHeaderText(text: string): string {
  return text.replace(/[^\x21-\x24\x26-\x7e]/gu, (c) => {
    try {
      return encodeURIComponent(c);
    } catch {
      // A lone surrogate (possible in a resource written through the library): U+FFFD, as UTF-8 decoding would.
      return "%EF%BF%BD";
    }
  });
}

/**
 * Fencing-Token (required), Fencing-Resource (default: the key) and Fencing-Holder (optional: the
 * lease's public holder id, which the stores need to tell two leases with one token apart) of a write.
 */
export function fenceFromHeaders(req: Request, key: string): Fence {
  const rawToken = single(req, "fencing-token");
  if (rawToken === undefined) throw invalid("a write needs a Fencing-Token header (the lease's token, a decimal string)", "Fencing-Token");
  const rawResource = single(req, "fencing-resource");
  const resource = rawResource === undefined ? key : decodeHeaderText(rawResource, "Fencing-Resource");
  // The schemas are the definition; a well-formed write (the hot path) is recognised without
  // building their results, and only a refusal runs them, for their explanation.
  const fast = TOKEN_PATTERN.test(rawToken) && BigInt(rawToken) <= MAX_TOKEN;
  if (!fast) {
    const token = tokenSchema.safeParse(rawToken);
    throw invalid(token.success ? "malformed" : (token.error.issues[0]?.message ?? "malformed"), "Fencing-Token");
  }
  // A key that passed keyProblem always satisfies the resource rules (shorter, no control characters, well-formed).
  if (rawResource !== undefined) {
    const checked = resourceSchema.safeParse(resource);
    if (!checked.success) throw invalid(checked.error.issues[0]?.message ?? "malformed", "Fencing-Resource");
  }
  const holder = single(req, "fencing-holder");
  if (holder === undefined) return { resource, token: BigInt(rawToken) };
  if (!HOLDER_PATTERN.test(holder)) throw invalid("a holder id is 1-128 characters of A-Z a-z 0-9 . _ : -", "Fencing-Holder");
  return { resource, token: BigInt(rawToken), holder };
}

// Strong tags only: If-Match compares strongly, and the gateway never issues weak ones.
const ENTITY_TAG = /^"([\x21\x23-\x7e]*)"$|^([\x21\x23-\x7e]+)$/;

/**
 * If-Match: one entity tag, the version a read returned (quoted as in ETag; a bare version is
 * accepted too). `*` and lists are refused rather than ignored: a precondition the gateway silently
 * dropped would turn a compare-and-set into a blind overwrite.
 */
export function ifVersionFromHeaders(req: Request, versionPattern: RegExp): string | undefined {
  for (const unsupported of ["if-none-match", "if-unmodified-since", "if-modified-since"]) {
    if (req.headers[unsupported] !== undefined)
      throw invalid("this precondition is not supported on writes; use If-Match with a version", unsupported);
  }
  const raw = single(req, "if-match");
  if (raw === undefined) return undefined;
  const m = ENTITY_TAG.exec(raw.trim());
  const version = m?.[1] ?? m?.[2];
  if (version === undefined || !versionPattern.test(version)) throw invalid("expected one version as returned in ETag", "If-Match");
  return version;
}

export function etag(version: string): string {
  return `"${version}"`;
}
