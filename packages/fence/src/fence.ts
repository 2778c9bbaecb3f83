import { InvalidArgumentError } from "./errors.js";
import { assertHolder, assertResource, assertToken } from "./rules.js";

/**
 * All the storage ever learns about a lock: which resource the token belongs to, the token, and
 * which lease presented it. A Lease from @fenced/lock satisfies it (it always carries a holder).
 *
 * The holder decides equal tokens: a store accepts a token equal to the highest it has accepted
 * only from the holder that presented that highest token. A fence without a holder is identified by
 * its token alone: it asserts that its issuer never hands the same token to two leases (an etcd
 * revision, a ZooKeeper zxid), and equal holderless tokens are taken to be the same lease.
 */
export interface Fence {
  readonly resource: string;
  readonly token: bigint;
  readonly holder?: string | undefined;
}

/** A fence copied and validated: what a store compares, immune to later mutation of the caller's object. */
export interface CheckedFence {
  readonly resource: string;
  readonly token: bigint;
  /** null: a fence without a holder (identified by its token alone). */
  readonly holder: string | null;
}

/** Validates a fence and copies it; InvalidArgumentError before any I/O if it is malformed. */
export function checkFence(fence: unknown, argument = "fence"): CheckedFence {
  if (typeof fence !== "object" || fence === null) throw new InvalidArgumentError(argument, "must be an object { resource, token, holder? }");
  // Read each field once: a getter must not be able to show the check one value and the store another.
  const { resource, token, holder } = fence as { resource?: unknown; token?: unknown; holder?: unknown };
  assertResource(resource, `${argument}.resource`);
  assertToken(token, `${argument}.token`);
  if (holder !== undefined) assertHolder(holder, `${argument}.holder`);
  return { resource, token, holder: holder ?? null };
}

/** Whether `incoming` may write where `highest` (with its holder) is the highest token accepted. */
export function admits(highest: { readonly token: bigint; readonly holder: string | null }, incoming: CheckedFence): boolean {
  if (incoming.token !== highest.token) return incoming.token > highest.token;
  return incoming.holder === highest.holder;
}
