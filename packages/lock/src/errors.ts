/**
 * Why one node did not count for an operation. Classified by error codes and client state, never by
 * message text; `detail` is the error's message, for people.
 */
export type NodeFailure =
  | { readonly node: number; readonly reason: "held"; readonly detail?: string }
  /**
   * The node is known down: its client's last attempt to connect failed and it has not connected
   * since (`code` ECONNREFUSED, or ETIMEDOUT, EHOSTUNREACH, ENOTFOUND … of that attempt), or a call
   * failed with ECONNREFUSED. The round did not wait for it.
   */
  | { readonly node: number; readonly reason: "refused"; readonly code: string; readonly detail: string }
  /** No answer within nodeTimeoutMs while its connection was up (a paused or overloaded node), or down with no error seen. */
  | { readonly node: number; readonly reason: "timeout" }
  /** The outcome was decided before this node answered (or before it was asked); it was not waited for. */
  | { readonly node: number; readonly reason: "unanswered" }
  /**
   * The call failed, or the node's connection was lost and not back within nodeTimeoutMs. `code`: the
   * system error's (ECONNRESET, EPIPE, …) or the Redis error reply's (WRONGTYPE, ERR, …), when it has one.
   */
  | { readonly node: number; readonly reason: "error"; readonly code?: string; readonly detail: string }
  | { readonly node: number; readonly reason: "not-held" };

function describe(failures: readonly NodeFailure[]): string {
  return failures
    .map((f) => {
      const code = "code" in f && f.code !== undefined ? ` ${f.code}` : "";
      const detail = "detail" in f && f.detail !== undefined ? ` (${f.detail})` : "";
      return `node ${f.node}: ${f.reason}${code}${detail}`;
    })
    .join("; ");
}

/** acquire() gave up: no attempt reached a quorum. `nodes` holds the per-node reasons of the last attempt. */
export class LockNotAcquiredError extends Error {
  override readonly name = "LockNotAcquiredError";
  constructor(
    readonly resource: string,
    readonly attempts: number,
    readonly nodes: readonly NodeFailure[],
  ) {
    super(`could not acquire ${JSON.stringify(resource)} after ${attempts} attempt(s): ${describe(nodes) || "no quorum"}`);
  }
}

/**
 * The resource has no fencing tokens left: a counter it needs is at 2^63 − 1 (MAX_TOKEN), the largest
 * token a store can compare, so no lease with a larger token can ever be granted. Thrown at once,
 * without retrying, after the attempt released every node (no lease key is left behind). Only an
 * operator can end it, by moving the work to another resource name: lowering a counter would repeat
 * tokens the stores have already seen.
 */
export class TokenSpaceExhaustedError extends Error {
  override readonly name = "TokenSpaceExhaustedError";
  readonly code = "token-space-exhausted";
  constructor(
    readonly resource: string,
    /** The highest counter a node reported (2^63 − 1, or above it on a node written by other means). */
    readonly highest: bigint,
  ) {
    super(`no fencing tokens left for ${JSON.stringify(resource)}: a counter is at ${highest}, and tokens end at 2^63 - 1`);
  }
}

/**
 * The lease can no longer be trusted: a majority of nodes could not confirm it (or it expired
 * locally, or was released). Used as the reason of `lease.signal` and thrown by a failed extend().
 */
export class LeaseLostError extends Error {
  override readonly name = "LeaseLostError";
  constructor(
    readonly resource: string,
    readonly token: bigint,
    readonly kind: "expired" | "released" | "quorum-lost",
    readonly nodes: readonly NodeFailure[] = [],
  ) {
    super(`lease on ${JSON.stringify(resource)} (token ${token}) lost: ${kind}` + (nodes.length > 0 ? ` — ${describe(nodes)}` : ""));
  }
}
