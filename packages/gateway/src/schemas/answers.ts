import { z } from "zod";
import { LEASE_ID_PATTERN } from "../auth/lease-id.js";
import { OBJECT_VERSION, RECORD_VERSION } from "@fenced/store";
import { credentialString, holderString as holder, resourceSchema as resource, tokenString } from "./fields.js";

/**
 * The JSON the gateway answers with, as zod schemas: the routes type their answers against these
 * (z.input), and openapi/ turns the same schemas into the document's response schemas, so that
 * what the code sends and what the document promises cannot drift apart. Request bodies are the
 * schemas that validate them (validation.ts); the problems' bodies are the table's (../problems/kinds.ts).
 */

/**
 * 201 of POST /v1/leases and 200 of POST /v1/leases/extend. `fence` is required, in every document:
 * a gateway serves leases only with fence keys (createGateway throws InvalidArgumentError without
 * them, and the config refuses `redis` without `fenceKeys`), so no lease is ever answered without a
 * credential; a gateway without leases answers these routes 404 and never this schema. One answer
 * type thus serves every configuration, and a client's writes use `fence` without a check.
 */
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
      .describe(
        "A capability to extend and release this lease, sealed by the gateway: keep it secret, send it only in request bodies. Each extension answers a new one; extend with the newest before validUntil",
      ),
    validUntil: z
      .number()
      .int()
      .describe(
        "Epoch milliseconds until which the lease is valid (the lock's estimate, minus drift): its credential is refused after it, and so is an extension with its lease id (a release is still accepted)",
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
