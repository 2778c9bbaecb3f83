import { InvalidArgumentError } from "./errors.js";
import { assertHolder, assertResource, assertToken, MAX_RESOURCES } from "./rules.js";

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

/**
 * Validates a fence and copies it; InvalidArgumentError before any I/O if it is malformed.
 *
 * A lease of several resources (a @fenced/lock Lease whose `fences` holds more than one, or a copy
 * of one whose `resources` does) is refused here: it is one fence per resource, and its `resource`
 * and `token` are only its first one's, so a write that took it as one fence would check one ratchet
 * and leave the others unraised. Where one fence is wanted, pass one of `lease.fences`; where several
 * are (checkFences), the whole lease.
 */
export function checkFence(fence: unknown, argument = "fence"): CheckedFence {
  if (typeof fence !== "object" || fence === null)
    throw new InvalidArgumentError(argument, "must be an object { resource, token, holder? }");
  // Read each field once: a getter must not be able to show the check one value and the store another.
  const { resource, token, holder, fences, resources } = fence as {
    resource?: unknown;
    token?: unknown;
    holder?: unknown;
    fences?: unknown;
    resources?: unknown;
  };
  // `resources` too: a copy of such a lease ({ ...lease }, structuredClone) keeps it, and its first
  // resource and token, but not `fences` (a getter of the class), nor its holder.
  const several =
    Array.isArray(fences) && fences.length > 1 ? fences.length : Array.isArray(resources) && resources.length > 1 ? resources.length : 0;
  if (several > 0)
    throw new InvalidArgumentError(
      argument,
      `is a lease of ${several} resources, a fence for each: pass the one for this write (lease.fences[i]), or the whole lease where several fences are taken`,
    );
  assertResource(resource, `${argument}.resource`);
  assertToken(token, `${argument}.token`);
  if (holder !== undefined) assertHolder(holder, `${argument}.holder`);
  return { resource, token, holder: holder ?? null };
}

/**
 * Several fences presented by one write, validated and copied in the order given: an array of
 * fences, or an object carrying them as `fences` (a @fenced/lock Lease of one or several resources).
 * InvalidArgumentError before any I/O when there are none, more than MAX_RESOURCES, one is
 * malformed, or two name the same resource (which of the two would the write be under?).
 */
export function checkFences(fences: unknown, argument = "fences"): CheckedFence[] {
  let list: unknown = fences;
  let path = argument;
  if (!Array.isArray(fences) && typeof fences === "object" && fences !== null && "fences" in fences) {
    list = (fences as { fences?: unknown }).fences;
    path = `${argument}.fences`;
  }
  if (!Array.isArray(list)) throw new InvalidArgumentError(argument, "must be an array of fences, or a lease (its fences)");
  if (list.length === 0) throw new InvalidArgumentError(path, "must hold at least one fence");
  if (list.length > MAX_RESOURCES) throw new InvalidArgumentError(path, `must hold at most ${MAX_RESOURCES} fences, got ${list.length}`);
  const checked: CheckedFence[] = [];
  const seen = new Set<string>();
  for (const [i, fence] of (list as unknown[]).entries()) {
    const one = checkFence(fence, `${path}[${i}]`);
    if (seen.has(one.resource))
      throw new InvalidArgumentError(`${path}[${i}].resource`, `repeats ${JSON.stringify(one.resource)}: one fence per resource`);
    seen.add(one.resource);
    checked.push(one);
  }
  return checked;
}

/** Whether `incoming` may write where `highest` (with its holder) is the highest token accepted. */
export function admits(highest: { readonly token: bigint; readonly holder: string | null }, incoming: CheckedFence): boolean {
  if (incoming.token !== highest.token) return incoming.token > highest.token;
  return incoming.holder === highest.holder;
}

/**
 * The rule for a fence that knows its lease ended: it is refused before any I/O, whether or not a
 * `signal` option was passed too, with the error `signal: lease.signal` would give. Every store
 * operation that takes a fence calls this first. It is a convenience for liveness (a holder that
 * already knows stops at once); the storage's check of the token remains the guarantee, since a
 * lease can end while a write is in flight, or without its holder noticing.
 *
 * - A `lostReason` property (a @fenced/lock Lease, or one of its `lease.fences`): throws it if it is an Error. It is the reason
 *   the lease's signal aborts with, and reading it allocates nothing, so `signal` is then not read:
 *   on a live lease that would create an AbortController and arm a timer on every write.
 * - Otherwise a `signal` that is aborted (`aborted === true`): throws its reason, or an AbortError.
 * Each property is read once, so a getter cannot show one answer here and another later.
 */
export function refuseEndedLease(fence: unknown): void {
  if (typeof fence !== "object" || fence === null) return;
  if ("lostReason" in fence) {
    const lost: unknown = fence.lostReason;
    if (lost instanceof Error) throw lost;
    return;
  }
  const signal: unknown = (fence as { signal?: unknown }).signal;
  if (typeof signal !== "object" || signal === null) return;
  if ((signal as { aborted?: unknown }).aborted !== true) return;
  throw (signal as AbortSignal).reason ?? new DOMException("This operation was aborted", "AbortError");
}
