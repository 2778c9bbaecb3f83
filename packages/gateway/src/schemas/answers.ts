import { z } from "zod";
import { CREDENTIAL_VERSION, HOLDER_PATTERN, KEY_ID_PATTERN, TOKEN_PATTERN } from "@fenced/fence";
import { LEASE_ID_PATTERN } from "../auth/lease-id.js";
import { PROBLEM_TYPES, type ProblemKind } from "../problems/problem.js";
import { OBJECT_VERSION, RECORD_VERSION, resourceSchema } from "./validation.js";

/**
 * The JSON the gateway answers with, as zod schemas: the routes type their answers against these
 * (z.input), and openapi/ turns the same schemas into the document's response schemas, so that
 * what the code sends and what the document promises cannot drift apart. Request bodies are the
 * schemas that validate them (schemas/validation.ts).
 */

const inner = (pattern: RegExp): string => pattern.source.replace(/^\^/, "").replace(/\$$/, "");

export const tokenString = z.string().regex(TOKEN_PATTERN).describe("A fencing token: a decimal string (tokens are 64-bit; a JSON number would round them)");
const resource = resourceSchema;
const key = z.string().min(1).describe("A record's or object's key");
const holder = z.string().regex(HOLDER_PATTERN).describe("The public holder id of the lease (never its secret)");

// fc2.<key id>.<base64url payload>.<base64url MAC> (@fenced/fence verifies it; this only describes it).
const CREDENTIAL = new RegExp(`^${CREDENTIAL_VERSION}\\.(?:${inner(KEY_ID_PATTERN)})\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$`);
export const credentialString = z
  .string()
  .max(4096)
  .regex(CREDENTIAL)
  .describe("A signed fence credential (resource, token, holder and the lease's end under the gateway's HMAC key), presented as Fencing-Credential on every write of the lease until validUntil");

/** 201 of POST /v1/leases and 200 of POST /v1/leases/extend. */
export const leaseAnswerSchema = z
  .strictObject({
    fence: credentialString.describe("The credential for Fencing-Credential, good until validUntil"),
    resource,
    token: tokenString,
    holder,
    leaseId: z
      .string()
      .max(4096)
      .regex(LEASE_ID_PATTERN)
      .describe("A capability to extend and release this lease, sealed by the gateway: keep it secret, send it only in request bodies. Each extension answers a new one; extend with the newest before validUntil"),
    validUntil: z.number().int().describe("Epoch milliseconds until which the lease is valid (the lock's estimate, minus drift): its credential is refused after it, and so is an extension with its lease id (a release is still accepted)"),
  })
  .describe("A granted or extended lease");
export type LeaseAnswer = z.input<typeof leaseAnswerSchema>;

/** 200 of PUT /v1/records/{key}. */
export const recordWriteAnswerSchema = z
  .strictObject({ version: z.string().regex(RECORD_VERSION).describe("The record's new version (also in ETag)"), token: tokenString })
  .describe("An accepted record write");
/** 200 of PUT /v1/objects/{key}. */
export const objectWriteAnswerSchema = z
  .strictObject({ version: z.string().regex(OBJECT_VERSION).describe("The object's new version (also in ETag)"), token: tokenString })
  .describe("An accepted object write");
export type WriteAnswer = z.input<typeof recordWriteAnswerSchema> | z.input<typeof objectWriteAnswerSchema>;

const backendHealth = z.strictObject({ ok: z.boolean(), error: z.string().optional().describe("Why the check failed (may name the backend's address)") });
/** 200 and 503 of GET /healthz. */
export const healthReportSchema = z
  .strictObject({
    status: z.enum(["ok", "unavailable"]),
    checks: z.strictObject({
      postgres: backendHealth.optional(),
      s3: backendHealth.optional(),
      redis: z
        .strictObject({ ok: z.boolean().describe("true while a quorum of nodes answers"), quorum: z.number().int().min(1), nodes: z.array(backendHealth).readonly() })
        .optional(),
    }),
  })
  .describe("One check per configured backend");
export type HealthAnswer = z.input<typeof healthReportSchema>;

/** What an `invalid-request` problem lists: which part of the request is wrong, and why. */
const fieldErrors = z.array(z.strictObject({ path: z.string(), message: z.string() }));

/**
 * The extension members of each problem type, beside RFC 9457's type, title, status and detail.
 * HttpProblem and classify() build their bodies against these types.
 */
export const PROBLEM_EXTENSIONS = {
  invalid: z.strictObject({ errors: fieldErrors.optional() }),
  unauthorized: z.strictObject({}),
  forbidden: z.strictObject({}),
  credentialRequired: z.strictObject({}),
  invalidCredential: z.strictObject({
    reason: z.enum(["unknown-key", "bad-signature"]).describe("unknown-key: no configured key has the credential's key id (never issued here, or retired: take a new lease); bad-signature: forged or altered"),
  }),
  credentialExpired: z.strictObject({
    resource,
    token: tokenString,
    expiredAt: z.number().int().describe("Epoch milliseconds: the end of the lease the credential was issued for (its validUntil)"),
  }),
  invalidLeaseId: z.strictObject({
    reason: z.enum(["unknown-key", "bad-signature"]).describe("unknown-key: sealed by a key this gateway does not hold (never issued here, or retired); bad-signature: edited or forged"),
  }),
  notFound: z.strictObject({}),
  method: z.strictObject({}),
  stale: z.strictObject({ resource, token: tokenString, highest: tokenString.describe("The highest token the storage has accepted for the resource") }),
  resourceMismatch: z.strictObject({ key, resource, owner: resource.describe("The resource that created the key") }),
  lockHeld: z.strictObject({ resource }),
  tokenSpaceExhausted: z.strictObject({ resource }),
  leaseLost: z.strictObject({ resource, token: tokenString, kind: z.enum(["expired", "released", "quorum-lost"]) }),
  version: z.strictObject({ key, expected: z.string(), actual: z.string().nullable().describe("The current version, or null when there is no record") }),
  tooLarge: z.strictObject({}),
  mediaType: z.strictObject({}),
  unavailable: z.strictObject({ resource: resource.optional() }),
  internal: z.strictObject({}),
} as const satisfies Record<ProblemKind, z.ZodObject>;

export type ProblemExtensions<K extends ProblemKind> = z.input<(typeof PROBLEM_EXTENSIONS)[K]>;

/** When each problem type is answered (the document's description of its schema). */
export const PROBLEM_DESCRIPTIONS: Record<ProblemKind, string> = {
  invalid: "A malformed token, key, resource, lease id, credential, If-Match, JSON or lease body, or an unsupported precondition; `errors` lists what is wrong",
  unauthorized: "No API key, or one that is not configured (with WWW-Authenticate: Bearer)",
  forbidden: "A key or resource outside the API key's prefixes, or a write with a read-only key",
  credentialRequired: "A write without Fencing-Credential from an API key that is not a trusted lock client",
  invalidCredential: "A Fencing-Credential that no key of this gateway signed",
  credentialExpired:
    "An authentic Fencing-Credential whose lease has ended (its validUntil has passed): nothing was written. Extend the lease before its validUntil and write with the credential the extension answers, or take a new lease",
  invalidLeaseId: "A lease id that no key of this gateway sealed: edited (its token, value, resource or end) or forged. No lease was extended or released",
  notFound: "No such record or object; an unknown route; a backend that is not configured",
  method: "A method the route does not serve (with Allow)",
  stale: "The storage has accepted a higher token for the resource (or this token from another lease). Nothing was written; this holder must stop",
  resourceMismatch: "The key was created under another resource; nothing was written",
  lockHeld: "Another lease holds the resource (Retry-After: 1)",
  tokenSpaceExhausted: "The resource's counter on the lock nodes has reached 2^63 - 1: no lease can be granted for it again (use a new resource name). Final: do not retry",
  leaseLost: "Extend: the lease id's validUntil has passed, or a majority of lock nodes no longer holds it. Register: the lease ran out before every store registered it (it was released)",
  version: "If-Match names a version that is no longer current; nothing was written",
  tooLarge: "The body is over the gateway's limit; nothing was kept",
  mediaType: "A JSON route without Content-Type application/json, or a Content-Encoding",
  unavailable: "A backend did not answer, too few lock nodes answered, or a store gave up under contention (Retry-After: 1)",
  internal: "A failure inside the gateway; the detail is only in its log",
};

/** The whole problem body of one type: RFC 9457's members, fixed for the type, and its extensions. */
export function problemSchema(kind: ProblemKind): z.ZodObject {
  const t = PROBLEM_TYPES[kind];
  return PROBLEM_EXTENSIONS[kind]
    .extend({ type: z.literal(t.type), title: z.literal(t.title), status: z.literal(t.status), detail: z.string().optional() })
    .describe(PROBLEM_DESCRIPTIONS[kind]);
}
