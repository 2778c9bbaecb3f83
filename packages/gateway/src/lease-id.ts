import { MAX_TOKEN } from "@fenced/fence";
import { HttpProblem } from "./problem.js";
import { resourceSchema } from "./validation.js";

/**
 * What a lease id carries: everything the lock needs to extend or release the lease, so that any
 * gateway instance can serve the call with no state of its own. `value` is the lease's 128-bit
 * random secret on the Redis nodes; it is what makes the id a capability (PROTOCOL.md, "Gateway").
 */
export interface LeaseIdParts {
  readonly resource: string;
  readonly token: bigint;
  readonly value: string;
}

// <token>.<value>.<base64url(UTF-8 resource)>: URL-safe as a path segment, no escaping needed.
export const LEASE_ID_PATTERN = /^(0|[1-9][0-9]{0,18})\.([0-9a-f]{32})\.([A-Za-z0-9_-]{1,2732})$/;

export function encodeLeaseId(parts: LeaseIdParts): string {
  return `${parts.token}.${parts.value}.${Buffer.from(parts.resource, "utf8").toString("base64url")}`;
}

/** Parses a lease id, or 400. Only the canonical spelling is accepted, so each lease has one id. */
export function decodeLeaseId(id: string): LeaseIdParts {
  const m = LEASE_ID_PATTERN.exec(id);
  const [token, value, encoded] = [m?.[1], m?.[2], m?.[3]];
  if (token === undefined || value === undefined || encoded === undefined || BigInt(token) > MAX_TOKEN) throw malformed();
  const bytes = Buffer.from(encoded, "base64url");
  // Node's base64url decoder skips what it cannot use; re-encoding catches every non-canonical form.
  if (bytes.toString("base64url") !== encoded) throw malformed();
  let resource: string;
  try {
    resource = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw malformed();
  }
  if (!resourceSchema.safeParse(resource).success) throw malformed();
  return { resource, token: BigInt(token), value };
}

function malformed(): HttpProblem {
  return new HttpProblem("invalid", "leaseId: not a lease id issued by this gateway", { errors: [{ path: "leaseId", message: "malformed" }] });
}
