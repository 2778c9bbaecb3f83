import { MAX_RESOURCES, MAX_TOKEN } from "@fenced/fence";
import { TOKEN_PATTERN, resourcesProblem } from "@fenced/fence/internal";
import { SealError, type CredentialKey } from "@fenced/fence/credentials";
import { parseEpochMs, MAX_SEALED_LENGTH, seal, unseal, type SealKind } from "@fenced/fence/internal";
import { PROBLEM_OF_CODE } from "../problems/kinds.js";
import { HttpProblem } from "../problems/problem.js";

/** One resource of a lease and its token, as a lease id carries it. */
interface LeaseIdFence {
  readonly resource: string;
  readonly token: bigint;
}

/**
 * What a lease id carries: everything the lock needs to extend or release the lease, so that any
 * gateway instance can serve the call with no state of its own. `value` is the lease's 128-bit
 * random secret on the Redis nodes; it is what makes the id a capability (PROTOCOL.md, "Gateway").
 */
export interface LeaseIdParts {
  /** Every resource of the lease with its token, in the lease's order: one for a lease of one resource. */
  readonly fences: readonly LeaseIdFence[];
  readonly value: string;
  /** Epoch ms: the lease's validUntil when this id was issued. An extension answers a new id. */
  readonly validUntil: number;
}

/**
 * A lease id is sealed (@fenced/fence, sealed.ts) under the gateway's fence keys, in a domain of its
 * own: every field an extension signs into a new credential — each resource, its token, the value
 * that names the lease on the nodes — comes from an id this gateway (or another holding its keys)
 * issued, never from the client. An id whose token, value, resource or end was edited does not verify.
 *
 * A lease of one resource (the format of every id issued before sets, still issued for one resource):
 *
 *   fl1.<key id>.<base64url("<token>\n<value>\n<validUntil>\n<resource>")>.<base64url(mac)>
 *
 * A lease of several resources, each with its token in the lease's order (2 to MAX_RESOURCES of them):
 *
 *   fl2.<key id>.<base64url("<value>\n<validUntil>\n<token 1>\n<resource 1>\n…\n<token n>\n<resource n>")>.<base64url(mac)>
 *
 * Each has its MAC domain ("fenced-lease-id/1", "fenced-lease-id/2"), so neither verifies as the
 * other, and a lease has one spelling: a set of one resource is an fl1 id, never an fl2 one.
 */
const ONE: SealKind = { version: "fl1", domain: "fenced-lease-id/1", fields: 4 };
const SET = { version: "fl2", domain: "fenced-lease-id/2" } as const;
const setKind = (resources: number): SealKind => ({ ...SET, fields: 2 + 2 * resources });
const VALUE = /^[0-9a-f]{32}$/;

/** The shape of a lease id, for the API document (the MAC decides whether it is one). */
export const LEASE_ID_PATTERN = /^fl[12]\.[A-Za-z0-9_-]{1,64}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/;

/**
 * The resources of one lease total at most this many bytes of UTF-8 — as many as one resource of
 * MAX_RESOURCE_LENGTH (512) UTF-16 units can take, so the bound never refuses a lease of one
 * resource. It keeps every lease id within MAX_SEALED_LENGTH (4,096 characters), which a set of 64
 * long resources would pass. The worst case that fits, and the margin:
 *
 *   payload ≤ 32 (value) + 16 (validUntil) + 64 × 19 (tokens up to 2^63 − 1) + 1,536 + 129 separators = 2,929 bytes
 *   id      ≤ "fl2." + 64 (key id) + "." + ⌈2,929 × 4 / 3⌉ = 3,906 + "." + 43 (MAC) = 4,019 characters
 */
export const MAX_LEASE_RESOURCE_BYTES = 1_536;

/** Why a set of resources cannot be one lease of this gateway's (its lease id would be too long), or undefined. */
export function leaseBytesProblem(resources: readonly string[]): string | undefined {
  const bytes = resources.reduce((sum, r) => sum + Buffer.byteLength(r, "utf8"), 0);
  return bytes <= MAX_LEASE_RESOURCE_BYTES
    ? undefined
    : `must total at most ${MAX_LEASE_RESOURCE_BYTES} bytes of UTF-8 (a lease id carries them all), got ${bytes}`;
}

export function encodeLeaseId(parts: LeaseIdParts, key: CredentialKey): string {
  const { fences, value, validUntil } = parts;
  const [first] = fences;
  if (first === undefined) throw new RangeError("a lease id names at least one resource");
  if (fences.length === 1) return seal(ONE, [first.token.toString(), value, validUntil.toString(), first.resource], key);
  return seal(setKind(fences.length), [value, validUntil.toString(), ...fences.flatMap((f) => [f.token.toString(), f.resource])], key);
}

/**
 * The lease an id names, if this gateway's keys sealed it: 400 when it is not a lease id at all, 403
 * `invalid-lease-id` when it is shaped like one but no configured key signed it (edited or forged).
 */
export function decodeLeaseId(id: string, keys: ReadonlyMap<string, CredentialKey>): LeaseIdParts {
  const kind = id.startsWith(`${SET.version}.`) ? setKindOf(id) : ONE;
  let fields: string[];
  try {
    fields = unseal(kind, id, keys).fields;
  } catch (err) {
    if (!(err instanceof SealError)) throw err;
    if (err.problem === "malformed") throw malformed();
    throw new HttpProblem(PROBLEM_OF_CODE.SEAL_INVALID, "leaseId: not a lease id issued by this gateway", { reason: err.problem });
  }
  // unseal checked the count: fl1 is token, value, end, resource; fl2 value, end, then a token and a resource per resource.
  const [value, end, pairs] =
    kind === ONE
      ? [fields[1] as string, fields[2] as string, [fields[0] as string, fields[3] as string]]
      : [fields[0] as string, fields[1] as string, fields.slice(2)];
  const fences: LeaseIdFence[] = [];
  for (let i = 0; i < pairs.length; i += 2) {
    const [token, resource] = [pairs[i] as string, pairs[i + 1] as string];
    if (!TOKEN_PATTERN.test(token) || BigInt(token) > MAX_TOKEN) throw malformed();
    fences.push({ resource, token: BigInt(token) });
  }
  const validUntil = parseEpochMs(end);
  // Sealed by us, so well-formed unless a key was used to seal something else: check anyway.
  if (!VALUE.test(value) || validUntil === undefined || resourcesProblem(fences.map((f) => f.resource)) !== undefined) throw malformed();
  return { fences, value, validUntil };
}

/**
 * The kind of an fl2 id: how many fields it seals, read from its payload before the MAC is checked
 * (only to know what to expect; unseal then checks every part, the MAC included). Anything that
 * cannot be a lease of 2 to MAX_RESOURCES resources is malformed.
 */
function setKindOf(id: string): SealKind {
  const payload = id.length <= MAX_SEALED_LENGTH ? id.split(".")[2] : undefined;
  if (payload === undefined) throw malformed();
  const fields = Buffer.from(payload, "base64url").toString("utf8").split("\n").length;
  const resources = (fields - 2) / 2;
  if (!Number.isInteger(resources) || resources < 2 || resources > MAX_RESOURCES) throw malformed();
  return setKind(resources);
}

function malformed(): HttpProblem {
  return new HttpProblem("invalid", "leaseId: not a lease id issued by this gateway", {
    errors: [{ path: "leaseId", message: "malformed" }],
  });
}
