import type { Redis } from "ioredis";
import { resourceKeys } from "@fenced/lock";
import { ANSWERING_NODE_TIMEOUT_MS, waitFor } from "@fenced/servers";
import { expect } from "vitest";

/**
 * What the gateway tests read on the lock nodes. A grant or an extension promises a quorum, no more:
 * a slower node's command lands within the node timeout, or never — an ACQUIRE a node answers
 * NOSCRIPT after the outcome was known is not sent again (the lock's quorum.ts, fallBack), and an
 * EXTEND finds no key there. So after a grant a node may hold nothing; no node may hold another value.
 * A release is sent to every node whatever happens, and lands on each within the node timeout.
 */

/** A quorum of the fixtures' three lock nodes. */
export const LOCK_QUORUM = 2;

export interface NodeKey {
  readonly value: string | null;
  /** Milliseconds; -2: no key, -1: a key with no time to live. */
  readonly pttl: number;
}

/** What each lock node holds under a resource's lease key. */
export function leaseOnNodes(clients: readonly Redis[], resource: string): Promise<NodeKey[]> {
  const key = resourceKeys(resource).lease;
  return Promise.all(clients.map(async (r) => ({ value: await r.get(key), pttl: await r.pttl(key) })));
}

/** The values the nodes hold, without the nodes that hold none. */
export const valuesOf = (nodes: readonly NodeKey[]): string[] => nodes.flatMap((n) => (n.value === null ? [] : [n.value]));

/** What every lock node holds, once `settled` holds on each (a release: every node gets it). */
export async function settledOnEvery(clients: readonly Redis[], resource: string, settled: (node: NodeKey) => boolean): Promise<NodeKey[]> {
  let nodes = await leaseOnNodes(clients, resource);
  await waitFor(
    `every lock node's key of ${resource}`,
    async () => (nodes = await leaseOnNodes(clients, resource)).every(settled),
    ANSWERING_NODE_TIMEOUT_MS,
  );
  return nodes;
}

/** What every lock node holds, once a quorum of them hold the lease with `settled` true; one value on every node that holds one. */
export async function heldOnQuorum(
  clients: readonly Redis[],
  resource: string,
  settled: (node: NodeKey) => boolean = () => true,
): Promise<NodeKey[]> {
  let nodes = await leaseOnNodes(clients, resource);
  await waitFor(
    `a quorum of lock nodes' keys of ${resource}`,
    async () => (nodes = await leaseOnNodes(clients, resource)).filter((n) => n.value !== null && settled(n)).length >= LOCK_QUORUM,
    ANSWERING_NODE_TIMEOUT_MS,
  );
  expect(new Set(valuesOf(nodes)).size, `the values on the lock nodes of ${resource}`).toBe(1);
  return nodes;
}

/**
 * A lease nothing has touched since `before` (heldOnQuorum's answer after its grant) is still there as
 * it was: every node that held it holds the same value, with a time to live in (0, maxPttlMs]; a node
 * that held nothing holds nothing or that value (its ACQUIRE landed late); a quorum hold it.
 */
export async function expectStillHeld(
  clients: readonly Redis[],
  resource: string,
  before: readonly NodeKey[],
  maxPttlMs: number,
): Promise<void> {
  const [value] = valuesOf(before);
  const now = await leaseOnNodes(clients, resource);
  const seen = `${resource}: before ${JSON.stringify(before)}, now ${JSON.stringify(now)}`;
  now.forEach((node, i) => {
    if (before[i]?.value !== null) expect(node.value, seen).toBe(value);
    else expect([null, value], seen).toContain(node.value);
    if (node.value !== null) {
      expect(node.pttl, seen).toBeGreaterThan(0);
      expect(node.pttl, seen).toBeLessThanOrEqual(maxPttlMs);
    }
  });
  expect(valuesOf(now).length, seen).toBeGreaterThanOrEqual(LOCK_QUORUM);
}
