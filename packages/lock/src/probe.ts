import { performance } from "node:perf_hooks";
import type { RedisClient } from "./client.js";
import type { NodeFailure } from "./errors.js";
import { connectionFailure, failureOf, lateFailure, onAnyDown, watchOf } from "./node-watch.js";
import { notBefore } from "./not-before.js";

/**
 * How each node answers a PING, named as the lock names a node that does not count (node-watch.ts):
 * for a health check. Not used by the lock itself.
 */

/** `up`: answered PONG; `pending`: neither answered nor failed by the time the outcome was known; else the lock's reason. */
export type NodeState = "up" | "pending" | "refused" | "timeout" | "error";

export interface NodeProbe {
  readonly node: number;
  readonly state: NodeState;
  /** up: how long its PING took, in milliseconds. */
  readonly ms?: number;
  /** refused, error: the system error's or the Redis error reply's code, when there is one. */
  readonly code?: string;
  /** refused, error: the error's message, for people (it may name the node's address). */
  readonly detail?: string;
}

export interface NodesProbe {
  /** A quorum of the nodes answered: the lock can grant leases. */
  readonly ok: boolean;
  readonly quorum: number;
  readonly nodes: readonly NodeProbe[];
}

/**
 * Once the outcome is known (a quorum answered, or too many failed for one), the nodes still silent
 * get as long again as the outcome took, and at least this: nodes that answer together are all
 * reported, while a node that answers nothing (a paused server) does not hold the answer back.
 */
const MIN_GRACE_MS = 10;

function asProbe(failure: NodeFailure): NodeProbe {
  const { node } = failure;
  const code = "code" in failure && failure.code !== undefined ? { code: failure.code } : {};
  const detail = "detail" in failure && failure.detail !== undefined ? { detail: failure.detail } : {};
  switch (failure.reason) {
    case "refused":
    case "timeout":
    case "error":
      return { node, state: failure.reason, ...code, ...detail };
    case "unanswered":
      return { node, state: "pending" };
    default:
      // held / not-held answer a lease script, never a PING.
      return { node, state: "error", ...detail };
  }
}

export interface ProbeOptions {
  /**
   * Wait for every node's answer (or `timeoutMs`), not only for the outcome: no node is `pending`.
   * For a check made once, such as a start check that names each node that did not answer.
   */
  readonly everyNode?: boolean;
}

/**
 * PINGs every node of a lock at once and resolves as soon as the outcome is known (see
 * MIN_GRACE_MS; with `everyNode`, not before every node has answered), every node has answered, or
 * `timeoutMs` has passed. A node whose client is known down
 * is `refused` at once without being sent anything, and so is one seen down while the probe waits
 * (the lock's own rule: quorum.ts); a node silent past `timeoutMs` is `timeout`.
 */
export function probeNodes(
  lock: { readonly clients: readonly RedisClient[]; readonly quorum: number },
  timeoutMs: number,
  options: ProbeOptions = {},
): Promise<NodesProbe> {
  const { clients, quorum } = lock;
  const count = clients.length;
  const watches = clients.map((client) => watchOf(client));
  const started = performance.now();
  return new Promise((resolve) => {
    const nodes: (NodeProbe | undefined)[] = new Array<NodeProbe | undefined>(count).fill(undefined);
    let up = 0;
    let failed = 0;
    let done = false;
    let cancelGrace: (() => void) | undefined;
    let stopWatching = (): void => undefined;
    const finish = (timedOut: boolean): void => {
      if (done) return;
      done = true;
      cancelDeadline();
      cancelGrace?.();
      stopWatching();
      const silent = (node: number): NodeProbe => (timedOut ? asProbe(lateFailure(node, watches[node])) : { node, state: "pending" });
      resolve({ ok: up >= quorum, quorum, nodes: nodes.map((probe, node) => probe ?? silent(node)) });
    };
    // A node counts once: the first of its answer, its failure, or its being seen down.
    const settle = (probe: NodeProbe): void => {
      if (done || nodes[probe.node] !== undefined) return;
      nodes[probe.node] = probe;
      if (probe.state === "up") up++;
      else failed++;
      if (up + failed === count) return finish(false);
      // As the deadline, through notBefore: after a stall, the answers already in the sockets are read first.
      if (options.everyNode !== true && cancelGrace === undefined && (up >= quorum || failed > count - quorum))
        cancelGrace = notBefore(performance.now(), Math.max(MIN_GRACE_MS, performance.now() - started), () => finish(false));
    };
    const cancelDeadline = notBefore(started, timeoutMs, () => finish(true));
    for (let node = 0; node < count; node++) {
      const down = watches[node]?.down;
      if (down !== undefined) {
        settle(asProbe(connectionFailure(node, down)));
        continue;
      }
      const client = clients[node] as RedisClient;
      client.ping().then(
        (answer) =>
          settle(
            answer === "PONG"
              ? { node, state: "up", ms: Math.round((performance.now() - started) * 10) / 10 }
              : { node, state: "error", detail: `unexpected answer to PING: ${String(answer)}` },
          ),
        (err: unknown) => settle(asProbe(failureOf(node, err, watches[node]))),
      );
    }
    if (done) return;
    // A node seen down while the probe waits for it: its PING stays queued in the client, the probe stops waiting.
    stopWatching = onAnyDown(() => {
      for (let node = 0; node < count; node++) {
        const down = nodes[node] === undefined ? watches[node]?.down : undefined;
        if (down !== undefined) settle(asProbe(connectionFailure(node, down)));
      }
    });
  });
}
