import { InvalidArgumentError } from "./errors.js";
import { FencedError } from "./fenced-error.js";
import { checkFence, type CheckedFence, type Fence } from "./fence.js";
import { HOLDER_PATTERN, resourceProblem, TOKEN_PATTERN, MAX_TOKEN } from "./rules.js";
import { parseEpochMs, seal, SealError, unseal, type CredentialKey, type SealKind, type SealProblem } from "./sealed.js";

/**
 * Fence credentials: a fence (resource, token, holder) and the end of its lease, sealed with
 * HMAC-SHA256 under a secret shared by whoever issues leases (a gateway, or a service running the
 * lock itself) and whoever accepts writes over HTTP (the gateway). A holder of a credential can write
 * with exactly that fence until its lease's end; nobody without the secret can make one, so a client
 * chooses neither its token, nor its resource, nor how long it may write.
 *
 *   fc2.<key id>.<base64url(payload)>.<base64url(mac)>          (sealed.ts)
 *   payload = "<token>\n<holder>\n<expires at, epoch ms>\n<resource>"
 *   mac     = HMAC-SHA256(secret, "fenced-fence-credential/2\n<key id>\n" + payload)
 *
 * The end is a liveness rule, not a safety one: it retires a forgotten or leaked credential, while
 * the storage's ratchet alone keeps older holders out. Clocks that disagree only move it.
 */
export const CREDENTIAL_VERSION = "fc2";
const CREDENTIAL: SealKind = { version: CREDENTIAL_VERSION, domain: "fenced-fence-credential/2", fields: 4 };

/** Why a credential was refused: a seal problem, or `expired` (it verified, and its lease has ended). */
export type CredentialProblem = SealProblem | "expired";

/**
 * A fence credential was refused; nothing was written (applied `"no"`). `problem` says why; `code`
 * is CREDENTIAL_MALFORMED (malformed), CREDENTIAL_INVALID (unknown-key, bad-signature) or
 * CREDENTIAL_EXPIRED (expired: an ExpiredCredentialError).
 */
export class CredentialError extends FencedError {
  override readonly name: string = "CredentialError";
  declare readonly code: "CREDENTIAL_MALFORMED" | "CREDENTIAL_INVALID" | "CREDENTIAL_EXPIRED";
  constructor(
    /** Why it was refused (before 0.2.0 this was `code`). */
    readonly problem: CredentialProblem,
    message: string,
  ) {
    super(credentialCode(problem), message);
  }
}

function credentialCode(problem: CredentialProblem): CredentialError["code"] {
  return problem === "malformed" ? "CREDENTIAL_MALFORMED" : problem === "expired" ? "CREDENTIAL_EXPIRED" : "CREDENTIAL_INVALID";
}

/** A credential that verified: the fence it carries, its lease's end, and which key signed it. */
export interface VerifiedCredential {
  readonly fence: CheckedFence & { readonly holder: string };
  /** Epoch ms: the lease's validUntil when the credential was minted. */
  readonly expiresAt: number;
  readonly keyId: string;
}

/** A fence that knows its lease's end (a @fenced/lock Lease has validUntil). */
export type FenceWithEnd = Fence & { readonly validUntil?: number | undefined };

function checkExpiry(expiresAt: unknown): number {
  if (typeof expiresAt !== "number" || !Number.isSafeInteger(expiresAt) || expiresAt < 0) {
    throw new InvalidArgumentError(
      "expiresAt",
      "a credential carries its lease's end: epoch milliseconds, a non-negative integer (a Lease's validUntil)",
    );
  }
  return expiresAt;
}

/**
 * Mints the credential for a fence until its lease's end: the fence's own `validUntil` (a Lease
 * satisfies both the fence and the end; it must carry a holder id), or `options.expiresAt` — the
 * earlier of the two when both are given, so a credential never outlives the lease it is minted from.
 * Whoever holds the secret can mint: keep it on the servers that issue leases and the gateways that
 * accept writes.
 */
export function mintFenceCredential(fence: FenceWithEnd, key: CredentialKey, options?: { readonly expiresAt?: number }): string {
  const checked = checkFence(fence);
  if (checked.holder === null)
    throw new InvalidArgumentError("fence.holder", "a credential names the lease: the fence must carry a holder id");
  const { validUntil } = fence;
  const given = options?.expiresAt;
  const expiresAt = checkExpiry(
    given === undefined ? validUntil : validUntil === undefined ? given : Math.min(checkExpiry(given), checkExpiry(validUntil)),
  );
  return seal(CREDENTIAL, [checked.token.toString(), checked.holder, expiresAt.toString(), checked.resource], key);
}

/**
 * Verifies a credential against the configured keys (looked up by id) in constant time for the MAC,
 * then its end against `now` (epoch ms, default Date.now()), and returns the fence it carries. Throws
 * CredentialError: `malformed` (not one canonical credential), `unknown-key` (no configured key has
 * its id: never issued here, or its key was retired), `bad-signature` (forged or altered), `expired`
 * (authentic, but its lease ended at `expiresAt` < now).
 */
export function verifyFenceCredential(
  credential: unknown,
  keys: ReadonlyMap<string, CredentialKey>,
  now: number = Date.now(),
): VerifiedCredential {
  let unsealed: { fields: string[]; keyId: string };
  try {
    unsealed = unseal(CREDENTIAL, credential, keys);
  } catch (err) {
    if (err instanceof SealError)
      throw new CredentialError(err.problem, err.problem === "malformed" ? "not a fence credential" : `the credential: ${err.message}`);
    throw err;
  }
  const [token, holder, end, resource] = unsealed.fields as [string, string, string, string];
  const expiresAt = parseEpochMs(end);
  if (
    !TOKEN_PATTERN.test(token) ||
    BigInt(token) > MAX_TOKEN ||
    !HOLDER_PATTERN.test(holder) ||
    resourceProblem(resource) !== undefined ||
    expiresAt === undefined
  ) {
    throw new CredentialError("malformed", "not a fence credential");
  }
  const verified: VerifiedCredential = { fence: { resource, token: BigInt(token), holder }, expiresAt, keyId: unsealed.keyId };
  // Only an authentic credential is judged by its end: a forger learns nothing from this answer.
  if (now > expiresAt) throw new ExpiredCredentialError(verified);
  return verified;
}

/** An authentic credential past its lease's end; carries what it verified to, for the refusal's detail. */
export class ExpiredCredentialError extends CredentialError {
  override readonly name = "ExpiredCredentialError";
  declare readonly code: "CREDENTIAL_EXPIRED";
  constructor(readonly credential: VerifiedCredential) {
    super(
      "expired",
      `the credential's lease ended at ${new Date(credential.expiresAt).toISOString()}: extend the lease in time, or take a new one`,
    );
  }
}
