import { FAMILY_VERSIONS } from "../stores/registration.js";
import { z } from "zod";
import { MAX_RESOURCES } from "@fenced/fence";
import { keyProblem } from "@fenced/fence/internal";
import { MAX_PUT_ALL } from "@fenced/store/internal";
import { credentialString, keyString, resourceSchema, tokenString } from "../vocabulary/fields.js";

/**
 * POST /v1/records: several records written in one transaction, each under the fence of the resource
 * it names, and the answer — a version and a token per write. The credentials travel in the body
 * (`fences`), not in headers: a set's credentials can be long (one per resource, up to
 * MAX_RESOURCES), which no header limit of this server or of a proxy in front of it is sized for,
 * and each write names the resource whose credential it is under, beside it.
 */

/** At most this many records in one request: the store's limit for one transaction. */
export const MAX_RECORD_WRITES = MAX_PUT_ALL;

/** A key as the body carries it: plain text, not percent-encoded; @fenced/fence's key rule (the stores'). */
const bodyKey = keyString
  .superRefine((key, ctx) => {
    const problem = keyProblem(key);
    if (problem !== undefined) ctx.addIssue({ code: "custom", message: `a key ${problem}` });
  })
  .describe(
    "The record's key, as text (not percent-encoded): at most 512 bytes of UTF-8; `.`/`..` segments, empty segments and control characters are refused",
  );

const write = z
  .strictObject({
    key: bodyKey,
    // Any JSON value, as PUT /v1/records/{key} takes it: checked by the store itself, before any I/O;
    // the document refers to its JsonValue schema.
    value: z
      .unknown()
      .refine((value) => value !== undefined, "a JSON value is required")
      .meta({ $ref: "#/components/schemas/JsonValue" }),
    resource: resourceSchema
      .optional()
      .describe(
        "The resource whose credential (in `fences`) the write is under: a new key becomes its, a key of another resource is refused (409 `resource-mismatch`). Required when `fences` holds more than one",
      ),
    ifVersion: z
      .string()
      .regex(FAMILY_VERSIONS.records)
      .optional()
      .describe("Write only if the record is still at this version (a `version` a read or write returned); else 412 `version-mismatch`"),
  })
  .describe("One record to write");

/** The body of POST /v1/records. */
export const recordWritesSchema = z
  .strictObject({
    fences: z
      .array(credentialString)
      .min(1)
      .max(MAX_RESOURCES)
      .describe(
        "The credentials the writes are under, one per resource (the `fence` of each `fences` entry of a lease answer): every one is checked against its resource's ratchet, and raised, whether or not a write names it",
      ),
    writes: z
      .array(write)
      .min(1)
      .max(MAX_RECORD_WRITES)
      .superRefine((writes, ctx) => {
        const seen = new Set<string>();
        writes.forEach((w, i) => {
          if (seen.has(w.key))
            ctx.addIssue({ code: "custom", path: [i, "key"], message: `repeats ${JSON.stringify(w.key)}: one write per key` });
          seen.add(w.key);
        });
      })
      .describe("The records, each key once: all of them are written, or none"),
  })
  .describe("Several records written together under the fences of one or more leases");

/** 200 of POST /v1/records. */
export const recordWritesAnswerSchema = z
  .strictObject({
    writes: z
      .array(
        z.strictObject({
          key: keyString,
          resource: resourceSchema.describe("The resource whose fence wrote it (the key's owner)"),
          version: z.string().regex(FAMILY_VERSIONS.records).describe("The record's new version"),
          token: tokenString,
        }),
      )
      .describe("One entry per write, in the order of the request"),
  })
  .describe("Accepted: every record was written, in one transaction");
export type RecordWritesAnswer = z.input<typeof recordWritesAnswerSchema>;
