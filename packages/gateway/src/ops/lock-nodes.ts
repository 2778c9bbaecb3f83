import type { NodeResult, NodesProbe } from "@fenced/lock/internal";
import type { Logger } from "pino";

/** What a lock node last answered: up, or the lock's reason for not counting it. */
export type LockNodeState = "up" | "refused" | "timeout" | "error";

/**
 * Each lock node's state, one source of truth: whatever answered last, a probe's PING (each scrape's
 * of /metrics, a readiness probe's, the start check's) or a lease script (the lock's onNodeResult).
 * Both feed `up(node, …)` (`fenced_gateway_lock_node_up`) here and nowhere else, in the order the
 * answers arrive, so a probe and a lease cannot each hold a state of their own and make the series
 * flap between them. A probe's `pending` node (no answer yet when the outcome was known) has said
 * nothing and changes nothing.
 * Each change between up and down is one `warn` line with the node's address (logs may name it).
 */
export class LockNodeStates {
  readonly #states: (LockNodeState | undefined)[];
  /** When each node's state was last set, on a count of the answers applied (`#applied`). */
  readonly #setAt: number[];
  #applied = 0;

  constructor(
    private readonly addresses: readonly (string | undefined)[],
    private readonly up: (node: number, up: boolean) => void,
    private readonly logger: Logger,
  ) {
    this.#states = addresses.map(() => undefined);
    this.#setAt = addresses.map(() => -1);
  }

  /** Taken as a probe starts: its answers do not override a state set after it (`probed`'s `since`). */
  mark(): number {
    return this.#applied;
  }

  /**
   * A probe's answer: every node that answered or failed, never a pending one — and none whose state a
   * lease script set after the probe started (`since`, from mark()): a probe's answers are applied when
   * it ends, up to a node timeout after they came, and an older PONG must not undo a newer failure.
   */
  probed(probe: NodesProbe, since: number): void {
    for (const { node, state, code } of probe.nodes)
      if (state !== "pending" && (this.#setAt[node] ?? -1) < since) this.#answered(node, state, code);
  }

  /** One node's answer to a lease script (RedlockOptions.onNodeResult). */
  result({ node, failure }: NodeResult): void {
    this.#answered(node, failure?.reason ?? "up", failure !== undefined && "code" in failure ? failure.code : undefined);
  }

  #answered(node: number, state: LockNodeState, code: string | undefined): void {
    if (node < 0 || node >= this.#states.length) return;
    const before = this.#states[node];
    this.#states[node] = state;
    this.#setAt[node] = this.#applied++;
    this.up(node, state === "up");
    // A node first seen up is how a gateway starts: a change is up ⇄ down, or a node first seen down.
    const wasUp = before === undefined ? true : before === "up";
    if (wasUp === (state === "up")) return;
    const fields = { node, address: this.addresses[node] ?? "unknown", state, ...(code === undefined ? {} : { code }) };
    if (state === "up") this.logger.warn(fields, "lock node answers again");
    else this.logger.warn(fields, "lock node down");
  }
}
