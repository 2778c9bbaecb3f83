import {
  parseEpochMs,
  SealError,
  TOKEN_PATTERN,
  MAX_TOKEN,
  resourceProblem,
  seal,
  unseal,
  type CredentialKey,
  type SealKind,
} from "@fenced/fence";
import { HttpProblem } from "../problems/problem.js";

/**
 * What a lease id carries: everything the lock needs to extend or release the lease, so that any
 * gateway instance can serve the call with no state of its own. `value` is the lease's 128-bit
 * random secret on the Redis nodes; it is what makes the id a capability (PROTOCOL.md, "Gateway").
 */
export interface LeaseIdParts {
  readonly resource: string;
  readonly token: bigint;
  readonly value: string;
  /** Epoch ms: the lease's validUntil when this id was issued. An extension answers a new id. */
  readonly validUntil: number;
}

/**
 * A lease id is sealed (@fenced/fence, sealed.ts) under the gateway's fence keys, in a domain of its
 * own: every field an extension signs into a new credential — resource, token, the value that names
 * the lease on the nodes — comes from an id this gateway (or another holding its keys) issued, never
 * from the client. An id whose token, value, resource or end was edited does not verify.
 *
 *   fl1.<key id>.<base64url("<token>\n<value>\n<validUntil>\n<resource>")>.<base64url(mac)>
 */
const LEASE_ID: SealKind = { version: "fl1", domain: "fenced-lease-id/1", fields: 4 };
const VALUE = /^[0-9a-f]{32}$/;

/** The shape of a lease id, for the API document (the MAC decides whether it is one). */
export const LEASE_ID_PATTERN = /^fl1\.[A-Za-z0-9_-]{1,64}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/;

export function encodeLeaseId(parts: LeaseIdParts, key: CredentialKey): string {
  return seal(LEASE_ID, [parts.token.toString(), parts.value, parts.validUntil.toString(), parts.resource], key);
}

/**
 * The lease an id names, if this gateway's keys sealed it: 400 when it is not a lease id at all, 403
 * `invalid-lease-id` when it is shaped like one but no configured key signed it (edited or forged).
 */
export function decodeLeaseId(id: string, keys: ReadonlyMap<string, CredentialKey>): LeaseIdParts {
  let fields: string[];
  try {
    fields = unseal(LEASE_ID, id, keys).fields;
  } catch (err) {
    if (!(err instanceof SealError)) throw err;
    if (err.code === "malformed") throw malformed();
    throw new HttpProblem("invalidLeaseId", "leaseId: not a lease id issued by this gateway", { reason: err.code });
  }
  const [token, value, end, resource] = fields as [string, string, string, string];
  const validUntil = parseEpochMs(end);
  // Sealed by us, so well-formed unless a key was used to seal something else: check anyway.
  if (
    !TOKEN_PATTERN.test(token) ||
    BigInt(token) > MAX_TOKEN ||
    !VALUE.test(value) ||
    validUntil === undefined ||
    resourceProblem(resource) !== undefined
  )
    throw malformed();
  return { resource, token: BigInt(token), value, validUntil };
}

function malformed(): HttpProblem {
  return new HttpProblem("invalid", "leaseId: not a lease id issued by this gateway", {
    errors: [{ path: "leaseId", message: "malformed" }],
  });
}
