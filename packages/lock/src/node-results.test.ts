import { ANSWERING_NODE_TIMEOUT_MS } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NodeResult } from "./options.js";
import { Redlock } from "./redlock.js";
import { ready, refusedReconnect, startTestNodes, type TestNodes } from "./test-support.js";

/**
 * RedlockOptions.onNodeResult: each node's result in each round, on real Redis nodes — answered with
 * its latency, refused at once when it is down, and `timeout` once nodeTimeoutMs has passed for a
 * paused node, also when the round had its outcome sooner. A hook that throws changes nothing.
 */
let t: TestNodes;

beforeAll(async () => {
  t = await startTestNodes(3, { faults: true });
});
afterAll(async () => {
  await t?.stop();
});

/** Waits until `results` holds a result of `round` for every node in `nodes`. */
async function resultsOf(results: readonly NodeResult[], round: NodeResult["phase"], nodes: readonly number[]): Promise<NodeResult[]> {
  await expect.poll(() => nodes.every((n) => results.some((r) => r.phase === round && r.node === n)), { timeout: 5_000 }).toBe(true);
  return nodes.map((n) => results.find((r) => r.phase === round && r.node === n) as NodeResult);
}

describe("onNodeResult", () => {
  it("reports every node of acquire, extend and release as answered, with its latency", async () => {
    const results: NodeResult[] = [];
    // Every node answers here: a node timeout far above any answer keeps a node late on a busy machine from reading as a timeout.
    const nodeTimeoutMs = ANSWERING_NODE_TIMEOUT_MS;
    const redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs, onNodeResult: (r) => results.push(r) });
    const lease = await redlock.acquire("node-results/answered", 5_000);
    await lease.extend(5_000);
    await lease.release();
    for (const round of ["acquire", "extend", "release"] as const) {
      const each = await resultsOf(results, round, [0, 1, 2]);
      for (const r of each) {
        expect(r.failure, `${round} node ${r.node}`).toBeUndefined();
        expect(r.ms).toBeGreaterThan(0);
        // An answer is one that came within nodeTimeoutMs: its latency, not the time since some other start.
        expect(r.ms).toBeLessThan(nodeTimeoutMs);
      }
    }
    // Each node once per round.
    expect(results.filter((r) => r.phase === "acquire")).toHaveLength(3);
  });

  it("a paused node is reported as timeout nodeTimeoutMs after the round began, though the round ended sooner", async () => {
    const results: NodeResult[] = [];
    // The two nodes that are up must both answer for the lease: a node timeout far above any answer, so
    // that a busy machine cannot make one of them miss it. The paused node is told timeout only then.
    const nodeTimeoutMs = ANSWERING_NODE_TIMEOUT_MS;
    const redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs, onNodeResult: (r) => results.push(r) });
    t.nodes[2]!.pause();
    try {
      const started = performance.now();
      const lease = await redlock.acquire("node-results/paused", 5_000);
      // A quorum granted: the acquire did not wait for the paused node.
      expect(performance.now() - started).toBeLessThan(nodeTimeoutMs);
      const [paused] = await resultsOf(results, "acquire", [2]);
      expect(paused?.failure).toMatchObject({ node: 2, reason: "timeout" });
      expect(paused?.ms).toBeGreaterThanOrEqual(nodeTimeoutMs);
      await lease.release();
    } finally {
      t.nodes[2]!.resume();
    }
  });

  it("a node that refuses connections is reported refused at once; a hook that throws changes nothing", async () => {
    const results: NodeResult[] = [];
    // The two nodes that are up must both answer for the lease (see above).
    const nodeTimeoutMs = ANSWERING_NODE_TIMEOUT_MS;
    const redlock = new Redlock(t.clients, {
      retryCount: 0,
      nodeTimeoutMs,
      onNodeResult: (r) => {
        results.push(r);
        throw new Error("an observer's bug");
      },
    });
    const refused = refusedReconnect(t.clients[1]!);
    await t.nodes[1]!.kill();
    await refused;
    try {
      const lease = await redlock.acquire("node-results/refused", 5_000);
      const [down] = await resultsOf(results, "acquire", [1]);
      expect(down?.failure).toMatchObject({ node: 1, reason: "refused", code: "ECONNREFUSED" });
      // Refused before anything was sent: nowhere near the node timeout a round waits for a silent node.
      expect(down?.ms).toBeLessThan(nodeTimeoutMs / 4);
      await lease.release();
    } finally {
      await t.nodes[1]!.restart();
      await ready(t.clients[1]!, 10_000);
    }
  });

  it("is checked: a function or nothing", () => {
    expect(() => new Redlock(t.clients, { onNodeResult: "log" as never })).toThrow(/options\.onNodeResult: must be a function/);
  });
});
