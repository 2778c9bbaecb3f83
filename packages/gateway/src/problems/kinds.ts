import { z } from "zod";
import type { ErrorCode } from "@fenced/fence";
import { SHED_REASONS } from "../vocabulary/shed-reasons.js";
import { keyString as key, resourceSchema as resource, tokenString } from "../vocabulary/fields.js";
import { STORE_NAMES } from "../stores/registry.js";

/**
 * Every kind of problem the gateway answers with, in one table: its status, its slug, its `title`,
 * when it is answered (the API document's description), the extension members its body carries
 * beside type, title, status and detail, and the Retry-After it carries. The slug is the kind's one
 * name outside the process, spelled three ways by outcomeNames(): the RFC 9457 `type`, the `problem`
 * field of the request log line and the `reason` label of a refused write in /metrics. Below it,
 * PROBLEM_OF_CODE: the kind that answers each code of the packages' errors (FencedError).
 * problem.ts (the HTTP mapping), the validation, the logs, the metrics and the API document read
 * these tables; they import none of them.
 */

/** What an `invalid-request` problem lists: which part of the request is wrong, and why. */
const fieldErrors = z.array(z.strictObject({ path: z.string(), message: z.string() }));
const none = z.strictObject({});
const storeBackend = z.enum(STORE_NAMES).describe("The backend the store was calling");

const KINDS = {
  invalid: {
    status: 400,
    slug: "invalid-request",
    title: "The request is malformed",
    description:
      "A malformed token, key, resource, set of resources, lease id, credential, If-Match, JSON, lease body or body of several records, or an unsupported precondition; `errors` lists what is wrong",
    extensions: z.strictObject({ errors: fieldErrors.optional() }),
  },
  unauthorized: {
    status: 401,
    slug: "unauthorized",
    title: "Missing or invalid API key",
    description: "No API key, or one that is not configured (with WWW-Authenticate: Bearer)",
    extensions: none,
  },
  forbidden: {
    status: 403,
    slug: "forbidden",
    title: "Outside the API key's scope",
    description: "A key or resource outside the API key's prefixes (any of a set's), or a write with a read-only key",
    extensions: none,
  },
  credentialRequired: {
    status: 403,
    slug: "credential-required",
    title: "A write needs a fence credential",
    description: "A write without Fencing-Credential from an API key that is not a trusted lock client",
    extensions: none,
  },
  invalidCredential: {
    status: 403,
    slug: "invalid-credential",
    title: "The fence credential does not verify",
    description: "A Fencing-Credential that no key of this gateway signed",
    extensions: z.strictObject({
      reason: z
        .enum(["unknown-key", "bad-signature"])
        .describe(
          "unknown-key: no configured key has the credential's key id (never issued here, or retired: take a new lease); bad-signature: forged or altered",
        ),
    }),
  },
  credentialExpired: {
    status: 403,
    slug: "credential-expired",
    title: "The fence credential's lease has ended",
    description:
      "An authentic Fencing-Credential whose lease has ended (its validUntil has passed): nothing was written. Extend the lease before its validUntil and write with the credential the extension answers, or take a new lease",
    extensions: z.strictObject({
      resource,
      token: tokenString,
      expiredAt: z.number().int().describe("Epoch milliseconds: the end of the lease the credential was issued for (its validUntil)"),
    }),
  },
  invalidLeaseId: {
    status: 403,
    slug: "invalid-lease-id",
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
  },
  notFound: {
    status: 404,
    slug: "not-found",
    title: "Not found",
    description: "No such record or object; an unknown route; a backend that is not configured",
    extensions: none,
  },
  method: {
    status: 405,
    slug: "method-not-allowed",
    title: "Method not allowed",
    description: "A method the route does not serve (with Allow)",
    extensions: none,
  },
  stale: {
    status: 409,
    slug: "stale-token",
    title: "Stale fencing token",
    description:
      "The storage has accepted a higher token for the resource (or this token from another lease). Nothing was written; this holder must stop",
    extensions: z.strictObject({
      resource,
      token: tokenString,
      highest: tokenString.describe("The highest token the storage has accepted for the resource"),
    }),
  },
  resourceMismatch: {
    status: 409,
    slug: "resource-mismatch",
    title: "The key belongs to another resource",
    description: "The key was created under another resource; nothing was written",
    extensions: z.strictObject({ key, resource, owner: resource.describe("The resource that created the key") }),
  },
  lockHeld: {
    status: 409,
    slug: "lock-held",
    title: "The lock is held by another lease",
    description: "Another lease holds the resource, or one of the resources asked for together (Retry-After: 1)",
    extensions: z.strictObject({
      resource: resource.describe("The resource asked for (a lease of several resources: the first of them)"),
      resources: z
        .array(resource)
        .optional()
        .describe("A lease of several resources: every one asked for; none was taken (a set is taken whole or not at all)"),
    }),
    retryAfter: 1,
  },
  tokenSpaceExhausted: {
    status: 409,
    slug: "token-space-exhausted",
    title: "The resource's fencing tokens are used up",
    description:
      "The resource's counter on the lock nodes has reached 2^63 - 1: no lease can be granted for it again (use a new resource name). Final: do not retry",
    extensions: z.strictObject({ resource }),
  },
  leaseLost: {
    status: 409,
    slug: "lease-lost",
    title: "The lease is lost",
    description:
      "Extend: the lease id's validUntil has passed, or a majority of lock nodes no longer holds it. Register: the lease ran out before every store registered it (it was released)",
    extensions: z.strictObject({ resource, token: tokenString, kind: z.enum(["expired", "released", "quorum-lost"]) }),
  },
  version: {
    status: 412,
    slug: "version-mismatch",
    title: "Version mismatch",
    description: "If-Match names a version that is no longer current; nothing was written",
    extensions: z.strictObject({
      key,
      expected: z.string(),
      actual: z.string().nullable().describe("The current version, or null when there is no record"),
    }),
  },
  tooLarge: {
    status: 413,
    slug: "too-large",
    title: "Body too large",
    description: "The body is over the gateway's limit; nothing was kept",
    extensions: none,
  },
  mediaType: {
    status: 415,
    slug: "unsupported-media-type",
    title: "Unsupported media type",
    description: "A JSON route without Content-Type application/json, or with a charset other than UTF-8, or a Content-Encoding",
    extensions: none,
  },
  corruptState: {
    status: 502,
    slug: "corrupt-state",
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
  },
  backendError: {
    status: 502,
    slug: "backend-error",
    title: "A backend answered with an error",
    description:
      "A backend refused the call with an error no store classifies (wrong credentials or permissions, a statement the database refused), or its client failed before an answer (S3 credentials it could not obtain, a TLS handshake, an answer it could not parse); the detail is only in the gateway's log. Nothing was written: an operator must look",
    extensions: z.strictObject({ backend: storeBackend }),
  },
  unavailable: {
    status: 503,
    slug: "unavailable",
    title: "A backend is unavailable",
    description:
      "A backend refused the connection, did not answer within the gateway's deadline or asked it to slow down, too few lock nodes answered, or a store gave up under contention. Nothing was written: retry after Retry-After",
    extensions: z.strictObject({ resource: resource.optional() }),
    retryAfter: 1,
  },
  overloaded: {
    status: 503,
    slug: "overloaded",
    title: "The gateway is overloaded",
    description:
      "Admission control refused the request before any lock or store work: the gateway is at its limit and its queue is full or the request waited its longest there, or its event loop is behind and the request's API key sends more than its fair share. Nothing was done: retry after Retry-After, with backoff. Never answered to a lease's extension or release",
    extensions: z.strictObject({
      reason: z
        .enum(SHED_REASONS)
        .describe(
          "queue-full: no room to wait; queue-timeout: waited the longest a request may; evicted: its place went to one of a higher priority or of an API key waiting less; event-loop-delay: the gateway is behind on the work it has, and the request's API key sends more than its fair share (lease acquisitions: half of it)",
        ),
    }),
    retryAfter: 1,
  },
  outcomeUnknown: {
    status: 503,
    slug: "outcome-unknown",
    title: "The write may have been applied",
    description:
      "The write was sent to the backend and its answer was lost (the connection died or the deadline passed after it left the gateway): it may or may not have been applied. Retry the write (a conditional one with the same If-Match), or read the key back first to learn whether it landed: a retry with the same fence is judged by the fence like any other write",
    extensions: z.strictObject({
      backend: storeBackend,
      key: key.optional().describe("The key written (absent for a lease's registration with a store)"),
    }),
    retryAfter: 1,
  },
  backendMisconfigured: {
    status: 503,
    slug: "backend-misconfigured",
    title: "A backend is not set up for the gateway",
    description:
      "The backend answers but is not set up for the store: PostgreSQL's tables are missing or older than this version (not-migrated), the bucket does not exist (no-such-bucket), the table does not exist (no-such-table), the container does not exist (no-such-container), or the backend ignores conditional writes (conditional-writes-unsupported). Nothing was written; an operator must act",
    extensions: z.strictObject({
      backend: storeBackend,
      problem: z.enum(["not-migrated", "no-such-bucket", "no-such-table", "no-such-container", "conditional-writes-unsupported"]),
    }),
    retryAfter: 30,
  },
  notSupported: {
    status: 501,
    slug: "not-supported",
    title: "The store cannot do this",
    description:
      "The store serving the route has no such operation: DynamoDB's records store uses no transaction, so it cannot write several records all or none (POST /v1/records). Nothing was written: write each record on its own",
    extensions: z.strictObject({ backend: storeBackend }),
  },
  internal: {
    status: 500,
    slug: "internal",
    title: "Internal error",
    description: "A failure inside the gateway; the detail is only in its log",
    extensions: none,
  },
} as const satisfies Record<string, KindDefinition>;

/** `stale-token` → `stale_token`: a slug as a Prometheus label value. */
type Snake<S extends string> = S extends `${infer A}-${infer B}` ? `${A}_${Snake<B>}` : S;

/** The names of an outcome, all spelled from its slug: the one rule for each spelling. */
export interface OutcomeNames<S extends string = string> {
  /** The problem body's `type`: a relative URI reference, on which clients branch. */
  readonly type: `/problems/${S}`;
  /** The `reason` label of fenced_gateway_writes_rejected_total when a write is answered with it. */
  readonly reason: Snake<S>;
  /** The `problem` field of the request's log line. */
  readonly log: S;
}

export function outcomeNames<S extends string>(slug: S): OutcomeNames<S> {
  return { type: `/problems/${slug}`, reason: slug.replaceAll("-", "_") as Snake<S>, log: slug };
}

/** What a kind's row says; its type, reason and log names are derived from `slug`. */
export interface KindDefinition {
  readonly status: number;
  /** Lowercase words joined by `-`: the kind's one name (see outcomeNames). */
  readonly slug: string;
  readonly title: string;
  /** When it is answered: the API document's description of its schema. */
  readonly description: string;
  /** The members its body carries beside RFC 9457's type, title, status and detail. */
  readonly extensions: z.ZodObject;
  /** Seconds in the Retry-After header every answer of this kind carries; absent: no header. */
  readonly retryAfter?: number;
}

export interface ProblemDefinition extends KindDefinition, OutcomeNames {}

type Kinds = typeof KINDS;

/** The table with each kind's names spelled out (type, reason, log). */
export const PROBLEM_TYPES = Object.fromEntries(
  Object.entries(KINDS).map(([kind, row]) => [kind, { ...row, ...outcomeNames(row.slug) }]),
) as { readonly [K in keyof Kinds]: Kinds[K] & OutcomeNames<Kinds[K]["slug"]> };

export type ProblemKind = keyof typeof PROBLEM_TYPES;

export const PROBLEM_KINDS = Object.keys(PROBLEM_TYPES) as ProblemKind[];

export type ProblemExtensions<K extends ProblemKind> = z.input<(typeof PROBLEM_TYPES)[K]["extensions"]>;

/**
 * The kind that answers an error of the packages, by its code: every code has one (a new code does
 * not compile until it is given its answer). Where the gateway knows more than the code — a lock
 * that is down rather than held, a credential in a named place — the route answers itself.
 */
export const PROBLEM_OF_CODE = {
  INVALID_ARGUMENT: "invalid",
  CREDENTIAL_MALFORMED: "invalid",
  CREDENTIAL_INVALID: "invalidCredential",
  CREDENTIAL_EXPIRED: "credentialExpired",
  SEAL_MALFORMED: "invalid",
  // The gateway seals only lease ids: a fence credential's seal problem arrives as a CredentialError.
  SEAL_INVALID: "invalidLeaseId",
  LOCK_NOT_ACQUIRED: "lockHeld",
  TOKEN_SPACE_EXHAUSTED: "tokenSpaceExhausted",
  LEASE_LOST: "leaseLost",
  STALE_TOKEN: "stale",
  VERSION_MISMATCH: "version",
  RESOURCE_MISMATCH: "resourceMismatch",
  CONTENTION: "unavailable",
  STORE_UNAVAILABLE: "unavailable",
  OUTCOME_UNKNOWN: "outcomeUnknown",
  STORE_SETUP: "backendMisconfigured",
  CORRUPT_STATE: "corruptState",
} as const satisfies Record<ErrorCode, ProblemKind>;

/**
 * The member every problem body the gateway sends carries beside its kind's: the request id, as the
 * answer's X-Request-Id header gives it (http/request-scope.ts), so that a client can quote it and an
 * operator find the request's log lines. Optional in the document: bodies of earlier versions, which
 * had none, still validate.
 */
const requestId = z
  .string()
  .optional()
  .describe(
    "The request's id, as the answer's X-Request-Id header gives it: the client's own X-Request-Id when it sent a sane one (1 to 128 letters, digits or -_.:+/=@), else one the gateway made. Every log line of the request carries it. Sent in every problem since 0.2.0",
  );

/** The whole problem body of one kind: RFC 9457's members, fixed for the kind, its extensions and the request id. */
export function problemSchema(kind: ProblemKind): z.ZodObject {
  const t = PROBLEM_TYPES[kind];
  return t.extensions
    .extend({ type: z.literal(t.type), title: z.literal(t.title), status: z.literal(t.status), detail: z.string().optional(), requestId })
    .describe(t.description);
}
