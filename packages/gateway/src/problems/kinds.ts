import { z } from "zod";
import { keyString as key, resourceSchema as resource, tokenString } from "../schemas/fields.js";

/**
 * Every kind of problem the gateway answers with, in one table: its status, its RFC 9457 `type`
 * and `title`, when it is answered (the API document's description), the extension members its
 * body carries beside type, title, status and detail, the `reason` label of a refused write in
 * /metrics, and the Retry-After it carries. problem.ts (the HTTP mapping), the validation and the API document read this table;
 * it imports none of them.
 */

/** What an `invalid-request` problem lists: which part of the request is wrong, and why. */
const fieldErrors = z.array(z.strictObject({ path: z.string(), message: z.string() }));
const none = z.strictObject({});
const storeBackend = z.enum(["postgres", "s3"]).describe("The backend the store was calling");

export const PROBLEM_TYPES = {
  invalid: {
    status: 400,
    type: "/problems/invalid-request",
    title: "The request is malformed",
    description:
      "A malformed token, key, resource, set of resources, lease id, credential, If-Match, JSON, lease body or body of several records, or an unsupported precondition; `errors` lists what is wrong",
    extensions: z.strictObject({ errors: fieldErrors.optional() }),
    reason: "invalid_request",
  },
  unauthorized: {
    status: 401,
    type: "/problems/unauthorized",
    title: "Missing or invalid API key",
    description: "No API key, or one that is not configured (with WWW-Authenticate: Bearer)",
    extensions: none,
    reason: "unauthorized",
  },
  forbidden: {
    status: 403,
    type: "/problems/forbidden",
    title: "Outside the API key's scope",
    description: "A key or resource outside the API key's prefixes (any of a set's), or a write with a read-only key",
    extensions: none,
    reason: "forbidden",
  },
  credentialRequired: {
    status: 403,
    type: "/problems/credential-required",
    title: "A write needs a fence credential",
    description: "A write without Fencing-Credential from an API key that is not a trusted lock client",
    extensions: none,
    reason: "credential_required",
  },
  invalidCredential: {
    status: 403,
    type: "/problems/invalid-credential",
    title: "The fence credential does not verify",
    description: "A Fencing-Credential that no key of this gateway signed",
    extensions: z.strictObject({
      reason: z
        .enum(["unknown-key", "bad-signature"])
        .describe(
          "unknown-key: no configured key has the credential's key id (never issued here, or retired: take a new lease); bad-signature: forged or altered",
        ),
    }),
    reason: "invalid_credential",
  },
  credentialExpired: {
    status: 403,
    type: "/problems/credential-expired",
    title: "The fence credential's lease has ended",
    description:
      "An authentic Fencing-Credential whose lease has ended (its validUntil has passed): nothing was written. Extend the lease before its validUntil and write with the credential the extension answers, or take a new lease",
    extensions: z.strictObject({
      resource,
      token: tokenString,
      expiredAt: z.number().int().describe("Epoch milliseconds: the end of the lease the credential was issued for (its validUntil)"),
    }),
    reason: "credential_expired",
  },
  invalidLeaseId: {
    status: 403,
    type: "/problems/invalid-lease-id",
    title: "The lease id was not issued by this gateway",
    description:
      "A lease id that no key of this gateway sealed: edited (its token, value, resource or end) or forged. No lease was extended or released",
    extensions: z.strictObject({
      reason: z
        .enum(["unknown-key", "bad-signature"])
        .describe(
          "unknown-key: sealed by a key this gateway does not hold (never issued here, or retired); bad-signature: edited or forged",
        ),
    }),
    reason: "error", // never the answer to a write
  },
  notFound: {
    status: 404,
    type: "/problems/not-found",
    title: "Not found",
    description: "No such record or object; an unknown route; a backend that is not configured",
    extensions: none,
    reason: "not_found",
  },
  method: {
    status: 405,
    type: "/problems/method-not-allowed",
    title: "Method not allowed",
    description: "A method the route does not serve (with Allow)",
    extensions: none,
    reason: "error", // never the answer to a write
  },
  stale: {
    status: 409,
    type: "/problems/stale-token",
    title: "Stale fencing token",
    description:
      "The storage has accepted a higher token for the resource (or this token from another lease). Nothing was written; this holder must stop",
    extensions: z.strictObject({
      resource,
      token: tokenString,
      highest: tokenString.describe("The highest token the storage has accepted for the resource"),
    }),
    reason: "stale_token",
  },
  resourceMismatch: {
    status: 409,
    type: "/problems/resource-mismatch",
    title: "The key belongs to another resource",
    description: "The key was created under another resource; nothing was written",
    extensions: z.strictObject({ key, resource, owner: resource.describe("The resource that created the key") }),
    reason: "resource_mismatch",
  },
  lockHeld: {
    status: 409,
    type: "/problems/lock-held",
    title: "The lock is held by another lease",
    description: "Another lease holds the resource, or one of the resources asked for together (Retry-After: 1)",
    extensions: z.strictObject({
      resource: resource.describe("The resource asked for (a lease of several resources: the first of them)"),
      resources: z
        .array(resource)
        .optional()
        .describe("A lease of several resources: every one asked for; none was taken (a set is taken whole or not at all)"),
    }),
    reason: "error", // never the answer to a write
    retryAfter: 1,
  },
  tokenSpaceExhausted: {
    status: 409,
    type: "/problems/token-space-exhausted",
    title: "The resource's fencing tokens are used up",
    description:
      "The resource's counter on the lock nodes has reached 2^63 - 1: no lease can be granted for it again (use a new resource name). Final: do not retry",
    extensions: z.strictObject({ resource }),
    reason: "error", // never the answer to a write
  },
  leaseLost: {
    status: 409,
    type: "/problems/lease-lost",
    title: "The lease is lost",
    description:
      "Extend: the lease id's validUntil has passed, or a majority of lock nodes no longer holds it. Register: the lease ran out before every store registered it (it was released)",
    extensions: z.strictObject({ resource, token: tokenString, kind: z.enum(["expired", "released", "quorum-lost"]) }),
    reason: "error", // never the answer to a write
  },
  version: {
    status: 412,
    type: "/problems/version-mismatch",
    title: "Version mismatch",
    description: "If-Match names a version that is no longer current; nothing was written",
    extensions: z.strictObject({
      key,
      expected: z.string(),
      actual: z.string().nullable().describe("The current version, or null when there is no record"),
    }),
    reason: "version_mismatch",
  },
  tooLarge: {
    status: 413,
    type: "/problems/too-large",
    title: "Body too large",
    description: "The body is over the gateway's limit; nothing was kept",
    extensions: none,
    reason: "too_large",
  },
  mediaType: {
    status: 415,
    type: "/problems/unsupported-media-type",
    title: "Unsupported media type",
    description: "A JSON route without Content-Type application/json, or with a charset other than UTF-8, or a Content-Encoding",
    extensions: none,
    reason: "unsupported_media_type",
  },
  corruptState: {
    status: 502,
    type: "/problems/corrupt-state",
    title: "The storage is not as the store left it",
    description:
      "A manifest, fence or record in the backend is not in a form the store wrote (truncated, edited by hand, or written by an incompatible version): the store refuses to judge a fence against it, nothing was written, an operator must repair it. Or (`what: body`, a read of an object) the key's manifest names a body that is missing, deleted while named: a write of the key replaces it. Retrying does not help",
    extensions: z.strictObject({
      backend: storeBackend,
      what: z
        .enum(["manifest", "fence", "record", "body"])
        .describe("Which state is corrupt (body: the data object the key's manifest names is missing)"),
      subject: z.string().describe("The key (manifest, record, body) or resource (fence) whose state is corrupt"),
    }),
    reason: "corrupt_state",
  },
  backendError: {
    status: 502,
    type: "/problems/backend-error",
    title: "A backend answered with an error",
    description:
      "A backend refused the call with an error no store classifies (wrong credentials or permissions, a statement the database refused), or its client failed before an answer (S3 credentials it could not obtain, a TLS handshake, an answer it could not parse); the detail is only in the gateway's log. Nothing was written: an operator must look",
    extensions: z.strictObject({ backend: storeBackend }),
    reason: "backend_error",
  },
  unavailable: {
    status: 503,
    type: "/problems/unavailable",
    title: "A backend is unavailable",
    description:
      "A backend refused the connection, did not answer within the gateway's deadline or asked it to slow down, too few lock nodes answered, or a store gave up under contention. Nothing was written: retry after Retry-After",
    extensions: z.strictObject({ resource: resource.optional() }),
    reason: "unavailable",
    retryAfter: 1,
  },
  outcomeUnknown: {
    status: 503,
    type: "/problems/outcome-unknown",
    title: "The write may have been applied",
    description:
      "The write was sent to the backend and its answer was lost (the connection died or the deadline passed after it left the gateway): it may or may not have been applied. Read the key back before retrying; a retry with the same fence is judged by the fence like any other write",
    extensions: z.strictObject({
      backend: storeBackend,
      key: key.optional().describe("The key written (absent for a lease's registration with a store)"),
    }),
    reason: "outcome_unknown",
    retryAfter: 1,
  },
  backendMisconfigured: {
    status: 503,
    type: "/problems/backend-misconfigured",
    title: "A backend is not set up for the gateway",
    description:
      "The backend answers but is not set up for the store: PostgreSQL's tables are missing or older than this version (not-migrated), the bucket does not exist (no-such-bucket), or the S3 backend ignores conditional writes (conditional-writes-unsupported). Nothing was written; an operator must act",
    extensions: z.strictObject({
      backend: storeBackend,
      problem: z.enum(["not-migrated", "no-such-bucket", "conditional-writes-unsupported"]),
    }),
    reason: "backend_misconfigured",
    retryAfter: 30,
  },
  internal: {
    status: 500,
    type: "/problems/internal",
    title: "Internal error",
    description: "A failure inside the gateway; the detail is only in its log",
    extensions: none,
    reason: "error",
  },
} as const satisfies Record<string, ProblemDefinition>;

export interface ProblemDefinition {
  readonly status: number;
  /** A relative URI reference: clients branch on it. */
  readonly type: `/problems/${string}`;
  readonly title: string;
  /** When it is answered: the API document's description of its schema. */
  readonly description: string;
  /** The members its body carries beside RFC 9457's type, title, status and detail. */
  readonly extensions: z.ZodObject;
  /** The `reason` label of fenced_gateway_writes_rejected_total when a write is answered with it. */
  readonly reason: string;
  /** Seconds in the Retry-After header every answer of this kind carries; absent: no header. */
  readonly retryAfter?: number;
}

export type ProblemKind = keyof typeof PROBLEM_TYPES;

export const PROBLEM_KINDS = Object.keys(PROBLEM_TYPES) as ProblemKind[];

export type ProblemExtensions<K extends ProblemKind> = z.input<(typeof PROBLEM_TYPES)[K]["extensions"]>;

/** The whole problem body of one kind: RFC 9457's members, fixed for the kind, and its extensions. */
export function problemSchema(kind: ProblemKind): z.ZodObject {
  const t = PROBLEM_TYPES[kind];
  return t.extensions
    .extend({ type: z.literal(t.type), title: z.literal(t.title), status: z.literal(t.status), detail: z.string().optional() })
    .describe(t.description);
}
