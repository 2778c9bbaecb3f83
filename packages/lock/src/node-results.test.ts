import type { Socket } from "node:net";
import { ANSWERING_NODE_TIMEOUT_MS } from "@fenced/servers";
import { stallUntilUnread } from "@fenced/servers/sockets";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NodeResult } from "./options.js";
import { Redlock } from "./redlock.js";
import { SCRIPTS } from "./scripts.js";
import { loadScripts, ready, refusedReconnect, startTestNodes, type TestNodes } from "./test-support.js";

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

  it("a node that answers NOSCRIPT after the outcome (its script cache was empty) is reported answered, and is sent the script", async () => {
    // No node has the scripts (a node restarted, or new): each answers the first call NOSCRIPT.
    await Promise.all(t.admin.map((admin) => admin.script("FLUSH")));
    const results: NodeResult[] = [];
    // Nodes 0 and 1 must answer both their calls (NOSCRIPT, then the EVAL that grants) for the lease.
    const nodeTimeoutMs = ANSWERING_NODE_TIMEOUT_MS;
    const redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs, onNodeResult: (r) => results.push(r) });
    t.nodes[2]!.pause();
    let lease;
    try {
      // A quorum granted without node 2, whose NOSCRIPT comes once it resumes: the acquire is not sent to it again.
      lease = await redlock.acquire("node-results/noscript", 5_000);
    } finally {
      t.nodes[2]!.resume();
    }
    for (const r of await resultsOf(results, "acquire", [0, 1, 2])) expect(r.failure, `node ${r.node}`).toBeUndefined();
    // A connection's commands run in order: once a PING sent now is answered, the SCRIPT LOAD sent after the NOSCRIPT has run.
    expect(await t.clients[2]!.ping()).toBe("PONG");
    expect(await t.admin[2]!.script("EXISTS", SCRIPTS.acquire.sha)).toEqual([1]);
    await lease.release();
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

  it("after a stall of the process past nodeTimeoutMs, counts the answers that arrived during it: granted, every node answered", async () => {
    // The scripts are loaded: each node answers the one call it is sent (no NOSCRIPT, and no second call to wait for).
    await Promise.all(t.admin.map(loadScripts));
    const results: NodeResult[] = [];
    const nodeTimeoutMs = 20;
    const redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs, onNodeResult: (r) => results.push(r) });
    const sockets = t.clients.map((client) => (client as unknown as { stream: Socket }).stream);
    const written = sockets.map((socket) => socket.bytesWritten);
    const acquiring = redlock.acquire("node-results/stalled", 5_000);
    // The lock hands its calls to the clients on the next tick (pipelining.ts): once each socket has
    // written them, the process stalls (as in a long garbage collection) past nodeTimeoutMs and until
    // every node's answer waits unread in its socket. The round's timer and the answers are then due
    // on one turn of the loop. Only ticks run until then: no turn of the loop could read an answer.
    for (let tick = 0; sockets.some((socket, node) => socket.bytesWritten === written[node]); tick++) {
      if (tick > 1_000) throw new Error("the acquire's calls were not written within 1,000 ticks");
      await new Promise((resolve) => process.nextTick(resolve));
    }
    stallUntilUnread(sockets, nodeTimeoutMs, ANSWERING_NODE_TIMEOUT_MS);
    const lease = await acquiring;
    // The lease was granted on the first two answers read; the third is told as it is read, a moment later.
    for (const r of await resultsOf(results, "acquire", [0, 1, 2])) expect(r.failure, `node ${r.node}`).toBeUndefined();
    expect(results.filter((r) => r.phase === "acquire")).toHaveLength(3);
    await lease.release();
  });

  it("is checked: a function or nothing", () => {
    expect(() => new Redlock(t.clients, { onNodeResult: "log" as never })).toThrow(/options\.onNodeResult: must be a function/);
  });
});
