import { createHmac, timingSafeEqual } from "node:crypto";
import { InvalidArgumentError } from "./errors.js";
import { checkFence, type CheckedFence, type Fence } from "./fence.js";
import { HOLDER_PATTERN, resourceProblem, TOKEN_PATTERN, MAX_TOKEN } from "./rules.js";

/**
 * Fence credentials: a fence (resource, token, holder) authenticated with HMAC-SHA256 under a secret
 * shared by whoever issues leases (a gateway, or a service running the lock itself) and whoever
 * accepts writes over HTTP (the gateway). A holder of a credential can write with exactly that fence;
 * nobody without the secret can make one, so a client cannot choose its own token or resource.
 *
 *   fc1.<key id>.<base64url(payload)>.<base64url(mac)>
 *   payload = "<token>\n<holder>\n<resource>"  (UTF-8; a resource never contains a control character)
 *   mac     = HMAC-SHA256(secret, "fenced-fence-credential/1\n<key id>\n" + payload)
 *
 * One spelling per credential: every part is checked to be canonical before the MAC is compared, so
 * a credential cannot be re-encoded into another string that verifies (no malleability).
 */

export const CREDENTIAL_VERSION = "fc1";
const DOMAIN = "fenced-fence-credential/1";
/** A secret shorter than this is refused: HMAC-SHA256's security needs a 256-bit key. */
export const MIN_SECRET_BYTES = 32;
export const KEY_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
const BASE64URL = /^[A-Za-z0-9_-]+$/;
const MAC_BYTES = 32;
const MAX_CREDENTIAL_LENGTH = 4096;

/** One signing key. Several may be configured at once so that a secret can be rotated without downtime. */
export interface CredentialKey {
  readonly id: string;
  /** At least 32 bytes of secret material. */
  readonly secret: Uint8Array;
}

/** Why a credential was refused. Thrown as CredentialError; never says which part of a MAC matched. */
export type CredentialProblem = "malformed" | "unknown-key" | "bad-signature";

export class CredentialError extends Error {
  override readonly name = "CredentialError";
  constructor(
    readonly code: CredentialProblem,
    message: string,
  ) {
    super(message);
  }
}

/** A credential that verified: the fence it carries, and which key signed it. */
export interface VerifiedCredential {
  readonly fence: CheckedFence & { readonly holder: string };
  readonly keyId: string;
}

export function assertCredentialKey(key: unknown, argument = "key"): asserts key is CredentialKey {
  if (typeof key !== "object" || key === null) throw new InvalidArgumentError(argument, "must be an object { id, secret }");
  const { id, secret } = key as { id?: unknown; secret?: unknown };
  if (typeof id !== "string" || !KEY_ID_PATTERN.test(id)) throw new InvalidArgumentError(`${argument}.id`, "must be 1-64 characters of A-Z a-z 0-9 _ -");
  if (!(secret instanceof Uint8Array)) throw new InvalidArgumentError(`${argument}.secret`, "must be a Uint8Array (Buffer)");
  if (secret.length < MIN_SECRET_BYTES) throw new InvalidArgumentError(`${argument}.secret`, `must be at least ${MIN_SECRET_BYTES} bytes, got ${secret.length}`);
}

function mac(key: CredentialKey, payload: Buffer): Buffer {
  return createHmac("sha256", key.secret).update(`${DOMAIN}\n${key.id}\n`, "utf8").update(payload).digest();
}

/**
 * Mints the credential for a fence (a Lease satisfies it; it must carry a holder id). Whoever holds
 * the secret can mint: keep it on the servers that issue leases and the gateways that accept writes.
 */
export function mintFenceCredential(fence: Fence, key: CredentialKey): string {
  const checked = checkFence(fence);
  if (checked.holder === null) throw new InvalidArgumentError("fence.holder", "a credential names the lease: the fence must carry a holder id");
  assertCredentialKey(key);
  const payload = Buffer.from(`${checked.token}\n${checked.holder}\n${checked.resource}`, "utf8");
  return `${CREDENTIAL_VERSION}.${key.id}.${payload.toString("base64url")}.${mac(key, payload).toString("base64url")}`;
}

/**
 * Verifies a credential against the configured keys (looked up by id) in constant time for the MAC,
 * and returns the fence it carries. Throws CredentialError: `malformed` (not one canonical credential),
 * `unknown-key` (no configured key has its id: never issued here, or its key was retired),
 * `bad-signature` (forged or altered).
 */
export function verifyFenceCredential(credential: unknown, keys: ReadonlyMap<string, CredentialKey>): VerifiedCredential {
  if (typeof credential !== "string" || credential.length > MAX_CREDENTIAL_LENGTH) throw malformed();
  const parts = credential.split(".");
  if (parts.length !== 4) throw malformed();
  const [version, keyId, encodedPayload, encodedMac] = parts as [string, string, string, string];
  if (version !== CREDENTIAL_VERSION || !KEY_ID_PATTERN.test(keyId) || !BASE64URL.test(encodedPayload) || !BASE64URL.test(encodedMac)) throw malformed();
  const payload = Buffer.from(encodedPayload, "base64url");
  const given = Buffer.from(encodedMac, "base64url");
  // Node's decoder skips what it cannot use: only the canonical spelling round-trips.
  if (payload.toString("base64url") !== encodedPayload || given.toString("base64url") !== encodedMac || given.length !== MAC_BYTES) throw malformed();
  const key = keys.get(keyId);
  if (key === undefined) throw new CredentialError("unknown-key", `no configured key has id ${JSON.stringify(keyId)}`);
  if (!timingSafeEqual(mac(key, payload), given)) throw new CredentialError("bad-signature", "the credential's signature does not verify");
  // Signed by us, so well-formed unless the key was used to sign something else: check anyway.
  const fields = payload.toString("utf8").split("\n");
  if (fields.length !== 3) throw malformed();
  const [token, holder, resource] = fields as [string, string, string];
  if (!TOKEN_PATTERN.test(token) || BigInt(token) > MAX_TOKEN || !HOLDER_PATTERN.test(holder) || resourceProblem(resource) !== undefined) throw malformed();
  return { fence: { resource, token: BigInt(token), holder }, keyId };
}

/** The configured keys by id; InvalidArgumentError for a weak secret or a duplicate id. */
export function credentialKeys(keys: readonly CredentialKey[]): ReadonlyMap<string, CredentialKey> {
  const byId = new Map<string, CredentialKey>();
  keys.forEach((key, i) => {
    assertCredentialKey(key, `keys[${i}]`);
    if (byId.has(key.id)) throw new InvalidArgumentError(`keys[${i}].id`, `duplicate key id ${JSON.stringify(key.id)}`);
    byId.set(key.id, { id: key.id, secret: Uint8Array.from(key.secret) });
  });
  return byId;
}

function malformed(): CredentialError {
  return new CredentialError("malformed", "not a fence credential");
}
