import { FAMILY_VERSIONS } from "../stores/registration.js";
import { z } from "zod";
import { LEASE_ID_PATTERN } from "../auth/lease-id.js";
import { OBJECT_VERSION } from "@fenced/store/internal";
import { MAX_RESOURCES } from "@fenced/fence";
import { NODE_STATES, READINESS_STATUSES } from "../vocabulary/health-states.js";
import { CHECK_STATES, SETUP_PROBLEMS } from "../stores/check.js";
import { byStore } from "../stores/registry.js";
import { credentialString, holderString as holder, resourceSchema as resource, tokenString } from "../vocabulary/fields.js";

/**
 * The JSON the gateway answers with, as zod schemas: the routes type their answers against these
 * (z.input), and openapi/ turns the same schemas into the document's response schemas, so that
 * what the code sends and what the document promises cannot drift apart. Request bodies are the
 * schemas that validate them (validation.ts); the problems' bodies are the table's (../problems/kinds.ts).
 */

/** One resource of a lease, with its token and the credential of the writes under it. */
const leaseFence = z
  .strictObject({
    resource,
    token: tokenString,
    fence: credentialString.describe("The credential of the writes under this resource (Fencing-Credential), good until validUntil"),
  })
  .describe("One resource of the lease: its token, and the credential every write under it presents");

/**
 * 201 of POST /v1/leases and 200 of POST /v1/leases/extend. `fence` is required, in every document:
 * a gateway serves leases only with fence keys (createGateway throws InvalidArgumentError without
 * them, and the config refuses `redis` without `fenceKeys`), so no lease is ever answered without a
 * credential; a gateway without leases answers these routes 404 and never this schema. One answer
 * type thus serves every configuration, and a client's writes use `fence` without a check.
 *
 * A lease of several resources has a fence per resource (`fences`, in the order asked for); `fence`,
 * `resource` and `token` are then its first resource's, so that the answer keeps one shape — and a
 * client of one resource reads it as before.
 */
export const leaseAnswerSchema = z
  .strictObject({
    fence: credentialString.describe(
      "The credential for Fencing-Credential, good until validUntil (a lease of several resources: its first resource's; each has its own in `fences`)",
    ),
    resource: resource.describe("The lease's resource (a lease of several resources: its first)"),
    token: tokenString.describe("The resource's fencing token, a decimal string (a lease of several resources: its first resource's)"),
    fences: z
      .array(leaseFence)
      .min(1)
      .max(MAX_RESOURCES)
      .describe(
        "Every resource of the lease with its token and credential, in the order asked for (one entry for a lease of one resource). A write under a resource presents that resource's credential",
      ),
    holder,
    leaseId: z
      .string()
      .max(4096)
      .regex(LEASE_ID_PATTERN)
      .describe(
        "A capability to extend and release this lease (all its resources), sealed by the gateway: keep it secret, send it only in request bodies. Each extension answers a new one; extend with the newest before validUntil",
      ),
    validUntil: z
      .number()
      .int()
      .describe(
        "Epoch milliseconds until which the lease is valid (the lock's estimate, minus drift): its credentials are refused after it, and so is an extension with its lease id (a release is still accepted)",
      ),
  })
  .describe("A granted or extended lease");
export type LeaseAnswer = z.input<typeof leaseAnswerSchema>;

/** 200 of PUT /v1/records/{key}. */
export const recordWriteAnswerSchema = z
  .strictObject({
    version: z.string().regex(FAMILY_VERSIONS.records).describe("The record's new version (also in ETag)"),
    token: tokenString,
  })
  .describe("An accepted record write");
/** 200 of PUT /v1/objects/{key}. */
export const objectWriteAnswerSchema = z
  .strictObject({ version: z.string().regex(OBJECT_VERSION).describe("The object's new version (also in ETag)"), token: tokenString })
  .describe("An accepted object write");
export type WriteAnswer = z.input<typeof recordWriteAnswerSchema> | z.input<typeof objectWriteAnswerSchema>;

const ADMIN_ONLY = "only on the admin listener (and in Gateway.health())";
const elapsedMs = z.number().min(0).describe("How long the check took, in milliseconds");
const storeHealth = z
  .strictObject({
    ok: z.boolean().describe("The store answered and is set up"),
    state: z
      .enum(CHECK_STATES)
      .describe(
        "up; refused, timeout, error: it could not be asked (an outage); misconfigured: it answered and refused this gateway's configuration (`problem`): an operator must act",
      ),
    problem: z.enum(SETUP_PROBLEMS).optional().describe("misconfigured: what to fix"),
    code: z.string().optional().describe("The backend's own code: PostgreSQL's SQLSTATE, S3's HTTP status, a system error's code"),
    error: z.string().optional().describe("What failed, for people (never an address)"),
    detail: z.string().optional().describe(`The backend's own message, which may name its address: ${ADMIN_ONLY}`),
    ms: elapsedMs,
  })
  .describe("One store's check: a read, as requests make it");
const nodeHealth = z
  .strictObject({
    ok: z.boolean().describe("The node answered PING"),
    state: z
      .enum(NODE_STATES)
      .describe(
        "up; pending: neither answered nor failed by the time the lock's outcome was known; refused, timeout, error: as the lock names a node that does not count",
      ),
    ms: elapsedMs.optional(),
    code: z.string().optional().describe("refused, error: the system error's or Redis error reply's code"),
    error: z.string().optional().describe("What failed, for people (never an address)"),
    address: z.string().optional().describe(`host:port of the node: ${ADMIN_ONLY}`),
    detail: z.string().optional().describe(`The client's own message, which may name the address: ${ADMIN_ONLY}`),
  })
  .describe("One lock node, in the order of the gateway's configuration");
/** 200 and 503 of GET /readyz and /healthz. */
export const healthReportSchema = z
  .strictObject({
    status: z
      .enum(READINESS_STATUSES)
      .describe(
        "ok: every backend serves. degraded (200): some backend does not answer while others serve; its routes answer 503 with Retry-After. unavailable (503): a store answered that it is not set up for this gateway, or no backend serves. draining (503): the instance is stopping (SIGTERM) and takes no new work; its backends are not checked",
      ),
    checks: z.strictObject({
      ...byStore(() => storeHealth.optional()),
      redis: z
        .strictObject({
          ok: z.boolean().describe("true once a quorum of nodes answered"),
          quorum: z.number().int().min(1),
          nodes: z.array(nodeHealth).readonly(),
        })
        .optional(),
    }),
  })
  .describe("Readiness: one check per configured backend");
export type HealthAnswer = z.input<typeof healthReportSchema>;
/** One store's entry in a readiness answer. */
export type StoreHealth = z.input<typeof storeHealth>;
/** 200 of GET /livez. */
export const livenessSchema = z
  .strictObject({ status: z.literal("ok").describe("The process answers; no backend is checked") })
  .describe("Liveness");
export type LivenessAnswer = z.input<typeof livenessSchema>;
