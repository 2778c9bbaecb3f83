import { z } from "zod";
import { type Fence } from "@fenced/fence";
import {
  CredentialError,
  credentialKeys,
  ExpiredCredentialError,
  mintFenceCredential,
  verifyFenceCredential,
  type CredentialKey,
} from "@fenced/fence/credentials";
import { KEY_ID_PATTERN, MIN_SECRET_BYTES } from "@fenced/fence/internal";
import { decodeLeaseId, encodeLeaseId, type LeaseIdParts } from "./lease-id.js";
import { PROBLEM_OF_CODE } from "../problems/kinds.js";
import { HttpProblem } from "../problems/problem.js";

/**
 * A signing key as configured (file or environment only, never a flag): its id and its secret in
 * base64, at least 32 bytes once decoded. The first key signs; every configured key verifies, so a
 * secret is rotated by adding the new key first, and removing the old one once its credentials have
 * gone out of use.
 */
export const fenceKeySchema = z
  .strictObject({
    id: z.string().regex(KEY_ID_PATTERN, "id: 1 to 64 of A-Z a-z 0-9 _ -"),
    secret: z.string().regex(/^[A-Za-z0-9+/_-]+={0,2}$/, "secret: base64"),
  })
  .transform((k, ctx): CredentialKey => {
    const secret = Buffer.from(k.secret, k.secret.includes("-") || k.secret.includes("_") ? "base64url" : "base64");
    if (secret.length < MIN_SECRET_BYTES)
      ctx.addIssue({ code: "custom", message: `secret: at least ${MIN_SECRET_BYTES} bytes once decoded, got ${secret.length}` });
    return { id: k.id, secret };
  });

/** One fence of a granted or extended lease, as its credential seals it (with the lease's end). */
export interface IssuedFence {
  readonly resource: string;
  readonly token: bigint;
  readonly holder: string;
}

/**
 * The gateway's seals, under its fence keys: the credential of every lease it grants or extends
 * (verified on every write), and the lease id that extends or releases it. The first key signs; all
 * configured keys verify.
 */
export class FenceCredentials {
  readonly #signing: CredentialKey;
  readonly #keys: ReadonlyMap<string, CredentialKey>;

  constructor(keys: readonly CredentialKey[]) {
    const first = keys[0];
    if (first === undefined) throw new RangeError("fence credentials need at least one key");
    this.#keys = credentialKeys(keys);
    this.#signing = this.#keys.get(first.id) as CredentialKey;
  }

  /** The credential for the writes under one fence of a lease, good until the lease's end (`validUntil`). */
  mint(fence: IssuedFence, validUntil: number): string {
    return mintFenceCredential(fence, this.#signing, { expiresAt: validUntil });
  }

  /** The lease id of a lease (of one resource or several): a capability to extend and release it. */
  leaseId(lease: LeaseIdParts): string {
    return encodeLeaseId(lease, this.#signing);
  }

  /** The lease an id names: 400 if it is not a lease id, 403 `invalid-lease-id` if no configured key sealed it. */
  lease(id: string): LeaseIdParts {
    return decodeLeaseId(id, this.#keys);
  }

  /**
   * The fence a credential carries; 400 if it is not one, 403 if no configured key signed it or its
   * lease has ended. `where` names it in a 400's `errors` (the header, or a place in a JSON body).
   */
  verify(credential: string, where = "Fencing-Credential"): Fence {
    try {
      return verifyFenceCredential(credential, this.#keys).fence;
    } catch (err) {
      if (!(err instanceof CredentialError)) throw err;
      if (err instanceof ExpiredCredentialError) {
        const { fence, expiresAt } = err.credential;
        throw new HttpProblem(PROBLEM_OF_CODE[err.code], err.message, {
          resource: fence.resource,
          token: fence.token.toString(),
          expiredAt: expiresAt,
        });
      }
      if (err.code === "CREDENTIAL_MALFORMED") {
        throw new HttpProblem(PROBLEM_OF_CODE[err.code], `${where}: ${err.message}`, { errors: [{ path: where, message: err.message }] });
      }
      // One status for both: `reason` says whether the key id is unknown (never issued here, or
      // retired by a rotation: the client needs a new lease) or the signature is wrong (forged, altered).
      throw new HttpProblem(PROBLEM_OF_CODE.CREDENTIAL_INVALID, "the fence credential was not signed by a key this gateway holds", {
        reason: err.problem === "unknown-key" ? "unknown-key" : "bad-signature",
      });
    }
  }
}
