import { createHmac, createSecretKey, timingSafeEqual, type KeyObject } from "node:crypto";
import { InvalidArgumentError } from "./errors.js";
import { FencedError } from "./fenced-error.js";
import { CONTROL_CHARACTER } from "./rules.js";

/**
 * Sealed strings: a few text fields authenticated with HMAC-SHA256 under a secret that only the
 * issuer holds. Fence credentials (credential.ts) and the gateway's lease ids are made of them, so
 * that what a server signed, and only that, comes back to it as trusted input.
 *
 *   <version>.<key id>.<base64url(payload)>.<base64url(mac)>
 *   payload = the fields joined by "\n"  (UTF-8; no field may contain a control character)
 *   mac     = HMAC-SHA256(secret, "<domain>\n<key id>\n" + payload)
 *
 * The domain names what is sealed ("fenced-fence-credential/2", "fenced-lease-id/1"), so a string
 * sealed as one kind never verifies as another, even under the same key. One spelling per sealed
 * string: every part is checked to be canonical before the MAC is compared (no malleability).
 */

/** A secret shorter than this is refused: HMAC-SHA256's security needs a 256-bit key. */
export const MIN_SECRET_BYTES = 32;
export const KEY_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
const BASE64URL = /^[A-Za-z0-9_-]+$/;
const MAC_BYTES = 32;
/** Longer strings are refused unread. */
export const MAX_SEALED_LENGTH = 4096;

/** One signing key. Several may be configured at once so that a secret can be rotated without downtime. */
export interface CredentialKey {
  readonly id: string;
  /** At least 32 bytes of secret material. */
  readonly secret: Uint8Array;
}

/** What is sealed, and how: its version prefix, the MAC's domain, and how many fields it holds. */
export interface SealKind {
  readonly version: string;
  readonly domain: string;
  readonly fields: number;
}

/** Why a sealed string was refused. Never says which part of a MAC matched. */
export type SealProblem = "malformed" | "unknown-key" | "bad-signature";

/**
 * A sealed string was refused (applied `"no"`). `problem` says why; `code` is SEAL_MALFORMED
 * (malformed) or SEAL_INVALID (unknown-key, bad-signature).
 */
export class SealError extends FencedError {
  override readonly name: string = "SealError";
  declare readonly code: "SEAL_MALFORMED" | "SEAL_INVALID";
  constructor(
    /** Why it was refused (before 0.2.0 this was `code`). */
    readonly problem: SealProblem,
    message: string,
  ) {
    super(problem === "malformed" ? "SEAL_MALFORMED" : "SEAL_INVALID", message);
  }
}

function assertCredentialKey(key: unknown, argument = "key"): asserts key is CredentialKey {
  if (typeof key !== "object" || key === null) throw new InvalidArgumentError(argument, "must be an object { id, secret }");
  const { id, secret } = key as { id?: unknown; secret?: unknown };
  if (typeof id !== "string" || !KEY_ID_PATTERN.test(id))
    throw new InvalidArgumentError(`${argument}.id`, "must be 1-64 characters of A-Z a-z 0-9 _ -");
  if (!(secret instanceof Uint8Array)) throw new InvalidArgumentError(`${argument}.secret`, "must be a Uint8Array (Buffer)");
  if (secret.length < MIN_SECRET_BYTES)
    throw new InvalidArgumentError(`${argument}.secret`, `must be at least ${MIN_SECRET_BYTES} bytes, got ${secret.length}`);
}

/**
 * HMAC keys of the keys credentialKeys() copied, made once. On Node 24, createHmac given the secret's
 * bytes takes ~4x as long as given a KeyObject (19 vs 4.5 µs per MAC). A key passed to seal() directly
 * is the caller's own object, whose bytes may change: its KeyObject is made on each call instead.
 */
const hmacKeys = new WeakMap<CredentialKey, KeyObject>();

/** The configured keys by id; InvalidArgumentError for a weak secret or a duplicate id. */
export function credentialKeys(keys: readonly CredentialKey[]): ReadonlyMap<string, CredentialKey> {
  const byId = new Map<string, CredentialKey>();
  keys.forEach((key, i) => {
    assertCredentialKey(key, `keys[${i}]`);
    if (byId.has(key.id)) throw new InvalidArgumentError(`keys[${i}].id`, `duplicate key id ${JSON.stringify(key.id)}`);
    // Frozen: its id goes into every MAC beside the KeyObject made below, which must stay its pair.
    const copy: CredentialKey = Object.freeze({ id: key.id, secret: Uint8Array.from(key.secret) });
    // Made once, from the secret as configured (createSecretKey copies the bytes).
    hmacKeys.set(copy, createSecretKey(copy.secret));
    byId.set(key.id, copy);
  });
  return byId;
}

function mac(kind: SealKind, key: CredentialKey, payload: Buffer): Buffer {
  return createHmac("sha256", hmacKeys.get(key) ?? createSecretKey(key.secret))
    .update(`${kind.domain}\n${key.id}\n`, "utf8")
    .update(payload)
    .digest();
}

/** Seals `fields` under `key`. No field may hold a control character ("\n" separates them). */
export function seal(kind: SealKind, fields: readonly string[], key: CredentialKey): string {
  assertCredentialKey(key);
  if (fields.length !== kind.fields)
    throw new InvalidArgumentError("fields", `${kind.version} seals ${kind.fields} fields, got ${fields.length}`);
  // A field with a separator in it would split into others when unsealed: never seal what cannot be read back.
  if (fields.some((f) => CONTROL_CHARACTER.test(f)))
    throw new InvalidArgumentError("fields", "a sealed field must not contain a control character");
  const payload = Buffer.from(fields.join("\n"), "utf8");
  return `${kind.version}.${key.id}.${payload.toString("base64url")}.${mac(kind, key, payload).toString("base64url")}`;
}

/**
 * The fields of a string sealed as `kind` by one of `keys` (looked up by id), the MAC compared in
 * constant time. Throws SealError: `malformed` (not one canonical sealed string of this kind),
 * `unknown-key` (no configured key has its id), `bad-signature` (forged or altered). The fields are
 * trusted only after the MAC verified; the caller still parses them.
 */
export function unseal(kind: SealKind, sealed: unknown, keys: ReadonlyMap<string, CredentialKey>): { fields: string[]; keyId: string } {
  if (typeof sealed !== "string" || sealed.length > MAX_SEALED_LENGTH) throw malformed();
  const parts = sealed.split(".");
  if (parts.length !== 4) throw malformed();
  const [version, keyId, encodedPayload, encodedMac] = parts as [string, string, string, string];
  if (version !== kind.version || !KEY_ID_PATTERN.test(keyId) || !BASE64URL.test(encodedPayload) || !BASE64URL.test(encodedMac))
    throw malformed();
  const payload = Buffer.from(encodedPayload, "base64url");
  const given = Buffer.from(encodedMac, "base64url");
  // Node's decoder skips what it cannot use: only the canonical spelling round-trips.
  if (payload.toString("base64url") !== encodedPayload || given.toString("base64url") !== encodedMac || given.length !== MAC_BYTES)
    throw malformed();
  const key = keys.get(keyId);
  if (key === undefined) throw new SealError("unknown-key", `no configured key has id ${JSON.stringify(keyId)}`);
  if (!timingSafeEqual(mac(kind, key, payload), given)) throw new SealError("bad-signature", "the signature does not verify");
  const fields = payload.toString("utf8").split("\n");
  // Signed by us, so well-formed unless the key was used to sign something else: check anyway.
  if (fields.length !== kind.fields) throw malformed();
  return { fields, keyId };
}

function malformed(): SealError {
  return new SealError("malformed", "not a string this issuer sealed");
}

/** Epoch milliseconds as sealed: a decimal integer without a leading zero, within Number's exact range. */
const EPOCH_MS_PATTERN = /^(0|[1-9][0-9]{0,15})$/;

export function parseEpochMs(text: string): number | undefined {
  if (!EPOCH_MS_PATTERN.test(text)) return undefined;
  const ms = Number(text);
  return Number.isSafeInteger(ms) ? ms : undefined;
}
