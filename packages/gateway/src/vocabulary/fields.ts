import { z } from "zod";
import { MAX_RESOURCE_LENGTH } from "@fenced/fence";
import { CONTROL_CHARACTER, HOLDER_PATTERN, resourceProblem, TOKEN_PATTERN } from "@fenced/fence/internal";
import { CREDENTIAL_VERSION, KEY_ID_PATTERN } from "@fenced/fence/internal";

/**
 * The fields every schema is made of — a token, a resource, a key, a holder id, a credential —
 * each defined once, for the requests (../schemas/validation.ts), the answers (../schemas/answers.ts) and
 * the problem kinds' extensions (../problems/kinds.ts); the version patterns are @fenced/store's. Nothing here
 * imports the rest of the gateway.
 */

/** A pattern's source without its anchors, to embed it in a larger pattern. */
export const unanchored = (pattern: RegExp): string => pattern.source.replace(/^\^/, "").replace(/\$$/, "");

export const tokenString = z
  .string()
  .regex(TOKEN_PATTERN)
  .describe("A fencing token: a decimal string (tokens are 64-bit; a JSON number would round them)");

/** A resource as the lock grants it and the stores accept it (@fenced/fence's rule). */
export const resourceSchema = z
  .string()
  .superRefine((value, ctx) => {
    const problem = resourceProblem(value);
    if (problem !== undefined) ctx.addIssue({ code: "custom", message: `a resource ${problem}` });
  })
  // The same rule in the API document's JSON Schema, which cannot run resourceProblem (it counts
  // code points where JavaScript counts UTF-16 units, and cannot see a lone surrogate).
  .meta({
    description: `A lock resource: 1-${MAX_RESOURCE_LENGTH} UTF-16 code units of well-formed Unicode without control characters`,
    minLength: 1,
    maxLength: MAX_RESOURCE_LENGTH,
    pattern: `^[^${CONTROL_CHARACTER.source.slice(1, -1)}]*$`,
  });

export const keyString = z.string().min(1).describe("A record's or object's key");

export const holderString = z.string().regex(HOLDER_PATTERN).describe("The public holder id of the lease (never its secret)");

// fc2.<key id>.<base64url payload>.<base64url MAC> (@fenced/fence verifies it; this only describes it).
const CREDENTIAL = new RegExp(`^${CREDENTIAL_VERSION}\\.(?:${unanchored(KEY_ID_PATTERN)})\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$`);
export const credentialString = z
  .string()
  .max(4096)
  .regex(CREDENTIAL)
  .describe(
    "A signed fence credential (resource, token, holder and the lease's end under the gateway's HMAC key), presented as Fencing-Credential on every write of the lease until validUntil",
  );
