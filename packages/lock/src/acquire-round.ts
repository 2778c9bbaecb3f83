import { performance } from "node:perf_hooks";
import { InvalidArgumentError } from "@fenced/fence";
import type { RedisClient } from "./client.js";
import { TokenSpaceExhaustedError, type NodeFailure } from "./errors.js";
import { resourceKeys } from "./keys.js";
import { Lease, type LeaseOwner } from "./lease.js";
import { newLeaseValue } from "./lease-value.js";
import { nodeEvents } from "./observe.js";
import type { NodeWatch } from "./node-watch.js";
import { sendScript } from "./pipelining.js";
import { driftMs, type NodeResult, type Settings } from "./options.js";
import {
  AcquireTally,
  ceilingReached,
  chooseTokens,
  failures,
  fallBack,
  fanOut,
  parseGrant,
  type Grant,
  type Reply,
  type ScriptCall,
  type TokenChoice,
} from "./quorum.js";
import { SCRIPTS } from "./scripts.js";

/** What an acquisition round uses of its Redlock (redlock.ts): the nodes, the settings, the release, and the owner of the lease it grants. */
export interface RoundNodes {
  readonly owner: LeaseOwner;
  readonly clients: readonly RedisClient[];
  readonly quorum: number;
  readonly settings: Settings;
  client(node: number): RedisClient;
  /** The nodes' watches (all nodes, or `nodes` in that order), watching again a client that ended. */
  currentWatches(nodes?: readonly number[]): readonly (NodeWatch | undefined)[];
  /** The fan-out's observer for onNodeResult, or undefined without one. */
  observer(phase: NodeResult["phase"], nodes?: readonly number[]): ((k: number, ms: number, failure?: NodeFailure) => void) | undefined;
  /** Deletes the lease keys holding `value` on `nodes` (waiting for all of them after a failed acquire). */
  releaseAll(leases: readonly string[], value: string, waitForAll: boolean, nodes: readonly number[]): Promise<void>;
}

/** One acquisition round: grant + counters on all nodes, publish if needed, then the validity. */
export async function acquireRound(round: RoundNodes, resources: readonly string[], ttlMs: number): Promise<Lease | NodeFailure[]> {
  const keys = resources.map(resourceKeys);
  const leases = keys.map((k) => k.lease);
  const value = newLeaseValue();
  const start = performance.now();
  const tally = new AcquireTally(round.clients.length, round.quorum, resources.length);
  // Once the fan-out has resolved, a node that answers NOSCRIPT must not get the acquire again
  // (see fallBack): the release that follows may already have run there.
  let fanningOut = true;
  const stillWanted = (): boolean => fanningOut;
  const call: ScriptCall = { script: SCRIPTS.acquire, keys: keys.flatMap((k) => [k.lease, k.counter]), args: [value, ttlMs] };
  const replies = await fanOut(round.clients.length, round.settings.nodeTimeoutMs, {
    send: (node) => sendScript(round.client(node), call),
    retry: (node, err) => fallBack(round.client(node), call, err, stillWanted),
    watches: round.currentWatches(),
    parse: (raw) => parseGrant(raw, resources.length),
    decided: (reply) => tally.add(reply),
    observe: round.observer("acquire"),
  });
  fanningOut = false;
  nodeEvents("acquire", replies);
  // The nodes this attempt sent ACQUIRE to: the only ones it can have left a lease key on.
  const reached = replies.flatMap((reply, node) => (!reply.ok && reply.unsent === true ? [] : [node]));
  const choices = chooseTokens(replies, round.quorum, resources.length);
  const ceiling = ceilingReached(replies, choices, round.quorum, resources.length);
  if (ceiling !== undefined) {
    // Never ask any node for a token past 2^63 - 1; leave nothing behind, then stop (retrying cannot help).
    await round.releaseAll(leases, value, true, reached);
    throw new TokenSpaceExhaustedError(resources[ceiling.resource] as string, ceiling.highest);
  }
  if (choices !== undefined && (await settle(round, keys, value, choices))) {
    // Every token is settled; only now is the validity computed, with the monotonic clock.
    const elapsed = performance.now() - start;
    const validityMs = Math.floor(ttlMs - elapsed - driftMs(ttlMs, round.settings.driftFactor));
    const held = choices.map((choice, i) => ({ resource: resources[i] as string, token: choice.token }));
    if (validityMs > 0) return new Lease(round.owner, held, value, validityMs);
  }
  // Not acquired: release on every node it sent to, including those that timed out or went down
  // meanwhile (their grant may still land; the release is queued behind it).
  await round.releaseAll(leases, value, true, reached);
  crossSlot(replies, resources);
  return failures(replies, (g: Grant, node) => (g.granted ? undefined : { node, reason: "held" }));
}

/**
 * Whether every resource's token counts on a quorum: nodes whose own INCR returned it, plus the
 * nodes that publishing moves to exactly it (PROTOCOL.md, "Choosing the token"). Publishes, in one
 * round, to each granting node that is behind on some resource, only the resources it is behind on.
 */
async function settle(
  round: RoundNodes,
  keys: readonly { lease: string; counter: string }[],
  value: string,
  choices: readonly TokenChoice[],
): Promise<boolean> {
  const counted = choices.map((c) => c.counted.length);
  const behind = (i: number): boolean => (counted[i] as number) < round.quorum;
  if (!choices.some((_, i) => behind(i))) return true;
  // Node → the resources (indexes) to publish there: those short of a quorum on which the node is behind.
  const publish = new Map<number, number[]>();
  choices.forEach((choice, i) => {
    if (behind(i)) for (const node of choice.behind) publish.set(node, [...(publish.get(node) ?? []), i]);
  });
  const nodes = [...publish.keys()];
  if (nodes.length === 0) return false;
  const calls = nodes.map((node): ScriptCall => {
    const which = publish.get(node) as number[];
    return {
      script: SCRIPTS.publish,
      keys: which.flatMap((i) => [(keys[i] as { lease: string }).lease, (keys[i] as { counter: string }).counter]),
      args: [value, ...which.map((i) => (choices[i] as TokenChoice).token.toString())],
    };
  });
  // Over once every resource counts on a quorum, or once one of them can no longer get there.
  const reachable = (i: number): boolean => (counted[i] as number) + pendingFor(publish, i) >= round.quorum;
  const published = await fanOut(nodes.length, round.settings.nodeTimeoutMs, {
    send: (k) => sendScript(round.client(nodes[k] as number), calls[k] as ScriptCall),
    retry: (k, err) => fallBack(round.client(nodes[k] as number), calls[k] as ScriptCall, err),
    watches: round.currentWatches(nodes),
    decided: (reply, k) => {
      const which = publish.get(nodes[k] as number) as number[];
      const moved = reply.ok && Array.isArray(reply.value) ? (reply.value as unknown[]) : [];
      which.forEach((i, j) => {
        if (moved[j] === 1) counted[i] = (counted[i] as number) + 1;
      });
      publish.delete(nodes[k] as number);
      if (!choices.some((_, i) => behind(i))) return true;
      return choices.some((_, i) => behind(i) && !reachable(i));
    },
    observe: round.observer("publish", nodes),
  });
  nodeEvents("publish", published, nodes);
  return !choices.some((_, i) => behind(i));
}

/** How many of the nodes still to answer publish resource `i`: the most they can add to its count. */
function pendingFor(publish: ReadonlyMap<number, readonly number[]>, i: number): number {
  let n = 0;
  for (const which of publish.values()) if (which.includes(i)) n++;
  return n;
}

/**
 * A set a node refused to run because its keys lie in different Redis Cluster slots (CROSSSLOT: Redis's
 * own classification) can never be granted there: InvalidArgumentError instead of a retry. Called after
 * the attempt released what it took on the other nodes.
 */
function crossSlot(replies: readonly Reply<Grant>[], resources: readonly string[]): void {
  const refused = replies.some((r) => !r.ok && r.failure.reason === "error" && r.failure.code === "CROSSSLOT");
  if (!refused) return;
  throw new InvalidArgumentError(
    "resources",
    `${resources.map((r) => JSON.stringify(r)).join(", ")} lie in different Redis Cluster slots, and a lease holds its set in one script per node: give them a common hash tag, the same text up to their first "}" (e.g. "{accounts}:alice", "{accounts}:bob")`,
  );
}
