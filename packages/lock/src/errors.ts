/** Why one node did not count for an operation. */
export type NodeFailure =
  | { readonly node: number; readonly reason: "held"; readonly detail?: string }
  | { readonly node: number; readonly reason: "timeout" }
  /** The outcome was decided before this node answered; it was not waited for. */
  | { readonly node: number; readonly reason: "unanswered" }
  | { readonly node: number; readonly reason: "error"; readonly detail: string }
  | { readonly node: number; readonly reason: "not-held" };

function describe(failures: readonly NodeFailure[]): string {
  return failures
    .map((f) => `node ${f.node}: ${f.reason}${"detail" in f && f.detail !== undefined ? ` (${f.detail})` : ""}`)
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
    super(
      `lease on ${JSON.stringify(resource)} (token ${token}) lost: ${kind}` +
        (nodes.length > 0 ? ` — ${describe(nodes)}` : ""),
    );
  }
}
