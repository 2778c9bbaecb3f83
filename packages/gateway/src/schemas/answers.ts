import { z } from "zod";
import { LEASE_ID_PATTERN } from "../auth/lease-id.js";
import { OBJECT_VERSION, RECORD_VERSION } from "@fenced/store";
import { MAX_RESOURCES } from "@fenced/fence";
import { credentialString, holderString as holder, resourceSchema as resource, tokenString } from "./fields.js";

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
  .strictObject({ version: z.string().regex(RECORD_VERSION).describe("The record's new version (also in ETag)"), token: tokenString })
  .describe("An accepted record write");
/** 200 of PUT /v1/objects/{key}. */
export const objectWriteAnswerSchema = z
  .strictObject({ version: z.string().regex(OBJECT_VERSION).describe("The object's new version (also in ETag)"), token: tokenString })
  .describe("An accepted object write");
export type WriteAnswer = z.input<typeof recordWriteAnswerSchema> | z.input<typeof objectWriteAnswerSchema>;

const backendHealth = z.strictObject({
  ok: z.boolean(),
  error: z.string().optional().describe("Why the check failed (may name the backend's address)"),
});
/** 200 and 503 of GET /healthz. */
export const healthReportSchema = z
  .strictObject({
    status: z
      .enum(["ok", "unavailable", "draining"])
      .describe("draining: the instance is stopping (SIGTERM) and takes no new work; its backends are not checked"),
    checks: z.strictObject({
      postgres: backendHealth.optional(),
      s3: backendHealth.optional(),
      redis: z
        .strictObject({
          ok: z.boolean().describe("true while a quorum of nodes answers"),
          quorum: z.number().int().min(1),
          nodes: z.array(backendHealth).readonly(),
        })
        .optional(),
    }),
  })
  .describe("One check per configured backend");
export type HealthAnswer = z.input<typeof healthReportSchema>;
