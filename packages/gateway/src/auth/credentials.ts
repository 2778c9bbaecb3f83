import { z } from "zod";
import type { Fence } from "@fenced/fence";
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

/** Verified credentials a gateway keeps (FenceCredentials): one per lease writing at once, and room to spare. */
const VERIFIED_CACHE_SIZE = 1_024;

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
  /**
   * Credentials this instance verified, by their exact text, with their fence and their lease's end:
   * a lease's holder writes many times with one credential, and each full check costs an HMAC and the
   * parse of every field (about 10 µs of a write's CPU, docs/benchmarks.md). Sound because a
   * credential's verdict depends only on its text and the keys — fixed for this instance's life — and
   * on the clock, which every hit asks again (verify). Only credentials that verified are kept, so a
   * forged or altered string is always checked in full; at most VERIFIED_CACHE_SIZE, the oldest dropped first.
   */
  readonly #verified = new Map<string, { readonly fence: Fence; readonly expiresAt: number }>();

  constructor(keys: readonly CredentialKey[]) {
    const first = keys[0];
    if (first === undefined) throw new RangeError("fence credentials need at least one key");
    this.#keys = credentialKeys(keys);
    this.#signing = this.#keys.get(first.id) as CredentialKey;
  }

  /** Keeps a verified credential, and returns the fence kept: the object every verify() of it answers. */
  #remember(credential: string, fence: Fence, expiresAt: number): Fence {
    if (this.#verified.size >= VERIFIED_CACHE_SIZE) this.#verified.delete(this.#verified.keys().next().value as string);
    // Frozen: every write presenting this credential, the first included, gets this one object.
    const kept = Object.freeze({ ...fence });
    this.#verified.set(credential, { fence: kept, expiresAt });
    return kept;
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
    const known = this.#verified.get(credential);
    // The cache's invariant: an entry answers only until its lease's end, as verifyFenceCredential
    // judges it (now > expiresAt is expired); past it the entry goes and the check below refuses it.
    if (known !== undefined) {
      if (Date.now() <= known.expiresAt) return known.fence;
      this.#verified.delete(credential);
    }
    try {
      const verified = verifyFenceCredential(credential, this.#keys);
      return this.#remember(credential, verified.fence, verified.expiresAt);
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
