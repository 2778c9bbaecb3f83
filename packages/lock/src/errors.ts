import { FencedError, type Applied } from "@fenced/fence";

/**
 * Every reason a node can fail to count for an operation: the one list, from which NodeFailureReason
 * and NodeFailure are derived (and against which the README's table of reasons is tested).
 */
export const NODE_FAILURE_REASONS = ["held", "not-held", "refused", "timeout", "error", "unanswered"] as const;
type NodeFailureReason = (typeof NODE_FAILURE_REASONS)[number];

/** What a NodeFailure carries beside `node`, by reason: every reason of NODE_FAILURE_REASONS needs an entry. */
interface NodeFailureFields {
  /** acquire: another lease holds the resource on the node. */
  held: { readonly detail?: string };
  /** extend: the node no longer holds this lease (released, expired there, or taken by another). */
  "not-held": object;
  /**
   * The node is known down: its client's last attempt to connect failed and it has not connected
   * since (`code` ECONNREFUSED, or ETIMEDOUT, EHOSTUNREACH, ENOTFOUND … of that attempt), or a call
   * failed with ECONNREFUSED. The round did not wait for it.
   */
  refused: { readonly code: string; readonly detail: string };
  /** No answer within nodeTimeoutMs while its connection was up (a paused or overloaded node), or down with no error seen. */
  timeout: object;
  /**
   * The call failed, or the node's connection was lost and not back within nodeTimeoutMs. `code`: the
   * system error's (ECONNRESET, EPIPE, …) or the Redis error reply's (WRONGTYPE, ERR, …), when it has one.
   */
  error: { readonly code?: string; readonly detail: string };
  /** The outcome was decided before this node answered (or before it was asked); it was not waited for. */
  unanswered: object;
}

/**
 * Why one node did not count for an operation. Classified by error codes and client state, never by
 * message text; `detail` is the error's message, for people.
 */
export type NodeFailure = {
  [R in NodeFailureReason]: { readonly node: number; readonly reason: R } & NodeFailureFields[R];
}[NodeFailureReason];

/**
 * Every way a lease is lost, the one list from which LeaseLostKind is derived: `expired` (its validity
 * ran out, or an extension was confirmed only after it had), `released` (this lease was released,
 * also while an extension was under way), `quorum-lost` (an extension was not confirmed by a majority).
 */
export const LEASE_LOST_KINDS = ["expired", "released", "quorum-lost"] as const;
export type LeaseLostKind = (typeof LEASE_LOST_KINDS)[number];

function describe(failures: readonly NodeFailure[]): string {
  return failures
    .map((f) => {
      const code = "code" in f && f.code !== undefined ? ` ${f.code}` : "";
      const detail = "detail" in f && f.detail !== undefined ? ` (${f.detail})` : "";
      return `node ${f.node}: ${f.reason}${code}${detail}`;
    })
    .join("; ");
}

/** How errors name a set of resources: JSON strings, comma-separated. */
function named(resources: readonly string[]): string {
  return resources.map((r) => JSON.stringify(r)).join(", ");
}

/**
 * acquire() gave up: no attempt reached a quorum. `nodes` holds the per-node reasons of the last
 * attempt. `resources`: every resource asked for, in order; `resource` is the first of them. Code
 * LOCK_NOT_ACQUIRED, applied "no": no lease is held (a node that did not answer a round's release
 * drops its key when the TTL ends).
 */
export class LockNotAcquiredError extends FencedError {
  override readonly name = "LockNotAcquiredError";
  declare readonly code: "LOCK_NOT_ACQUIRED";
  readonly resources: readonly string[];
  constructor(
    readonly resource: string,
    readonly attempts: number,
    readonly nodes: readonly NodeFailure[],
    resources: readonly string[] = [resource],
  ) {
    super("LOCK_NOT_ACQUIRED", `could not acquire ${named(resources)} after ${attempts} attempt(s): ${describe(nodes) || "no quorum"}`);
    this.resources = Object.freeze([...resources]);
  }
}

/**
 * The resource has no fencing tokens left: a counter it needs is at 2^63 − 1 (MAX_TOKEN), the largest
 * token a store can compare, so no lease with a larger token can ever be granted. Thrown at once,
 * without retrying, after the attempt released every node (no lease key is left behind). Only an
 * operator can end it, by moving the work to another resource name: lowering a counter would repeat
 * tokens the stores have already seen. Code TOKEN_SPACE_EXHAUSTED (before 0.2.0 "token-space-exhausted"),
 * applied "no".
 */
export class TokenSpaceExhaustedError extends FencedError {
  override readonly name = "TokenSpaceExhaustedError";
  declare readonly code: "TOKEN_SPACE_EXHAUSTED";
  constructor(
    readonly resource: string,
    /** The highest counter a node reported (2^63 − 1, or above it on a node written by other means). */
    readonly highest: bigint,
  ) {
    super(
      "TOKEN_SPACE_EXHAUSTED",
      `no fencing tokens left for ${JSON.stringify(resource)}: a counter is at ${highest}, and tokens end at 2^63 - 1`,
    );
  }
}

/** A resource of a lease and its token, as errors report them. */
export interface HeldFence {
  readonly resource: string;
  readonly token: bigint;
}

/**
 * The lease can no longer be trusted: a majority of nodes could not confirm it (or it expired
 * locally, or was released). Used as the reason of `lease.signal` and thrown by a failed extend().
 * `fences`: every resource of the lease with its token; `resource` and `token` are the first's.
 * Code LEASE_LOST. `applied`: "unknown" (the default) when nodes were asked to extend it (some may
 * have) or work ran under it (using() rethrows it after its function settles); "no" when the call
 * that threw it sent nothing (an extend() of a lease already past its end).
 */
export class LeaseLostError extends FencedError {
  override readonly name = "LeaseLostError";
  declare readonly code: "LEASE_LOST";
  readonly fences: readonly HeldFence[];
  constructor(
    readonly resource: string,
    readonly token: bigint,
    readonly kind: LeaseLostKind,
    readonly nodes: readonly NodeFailure[] = [],
    fences: readonly HeldFence[] = [{ resource, token }],
    options: { readonly applied?: Applied } = {},
  ) {
    const lease =
      fences.length === 1
        ? `${JSON.stringify(resource)} (token ${token})`
        : fences.map((f) => `${JSON.stringify(f.resource)} (token ${f.token})`).join(", ");
    super("LEASE_LOST", `lease on ${lease} lost: ${kind}` + (nodes.length > 0 ? ` — ${describe(nodes)}` : ""), {
      applied: options.applied ?? "unknown",
    });
    this.fences = Object.freeze(fences.map((f) => Object.freeze({ resource: f.resource, token: f.token })));
  }
}
