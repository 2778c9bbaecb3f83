import { performance } from "node:perf_hooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { probeNodes } from "./probe.js";
import { Redlock } from "./redlock.js";
import { ready, refusedReconnect, startTestNodes, type TestNodes } from "./test-support.js";

/**
 * probeNodes on real Redis nodes: every node up; a paused node pending once a quorum answered (not
 * waited for), and timeout when no quorum can be known sooner; a node shut down refused at once.
 */
let t: TestNodes;
let redlock: Redlock;
const TIMEOUT_MS = 1_500;

beforeAll(async () => {
  t = await startTestNodes(3, { faults: true });
  redlock = new Redlock(t.clients);
});
afterAll(async () => {
  await t?.stop();
});

async function timed(): Promise<{ ms: number; probe: Awaited<ReturnType<typeof probeNodes>> }> {
  const started = performance.now();
  const probe = await probeNodes(redlock, TIMEOUT_MS);
  return { ms: performance.now() - started, probe };
}

describe("probeNodes", () => {
  it("every node up, each with its latency", async () => {
    const { probe } = await timed();
    expect(probe.ok).toBe(true);
    expect(probe.quorum).toBe(2);
    expect(probe.nodes.map((n) => n.state)).toEqual(["up", "up", "up"]);
    for (const n of probe.nodes) expect(n.ms).toBeGreaterThan(0);
  });

  it("a paused node: pending, and the probe does not wait for it; two paused: timeout at the deadline", async () => {
    t.nodes[2]!.pause();
    try {
      const one = await timed();
      expect(one.probe).toMatchObject({ ok: true, nodes: [{ state: "up" }, { state: "up" }, { state: "pending" }] });
      expect(one.ms).toBeLessThan(TIMEOUT_MS / 2);
      t.nodes[1]!.pause();
      try {
        const two = await timed();
        expect(two.probe).toMatchObject({ ok: false, nodes: [{ state: "up" }, { state: "timeout" }, { state: "timeout" }] });
        expect(two.ms).toBeGreaterThanOrEqual(TIMEOUT_MS);
      } finally {
        t.nodes[1]!.resume();
      }
    } finally {
      t.nodes[2]!.resume();
    }
  });

  it("a node shut down: refused at once, with the code the lock reads", async () => {
    const client = t.clients[0]!;
    const refused = refusedReconnect(client);
    await t.nodes[0]!.kill();
    await refused;
    try {
      const { ms, probe } = await timed();
      expect(probe).toMatchObject({ ok: true, nodes: [{ state: "refused", code: "ECONNREFUSED" }, { state: "up" }, { state: "up" }] });
      expect(ms).toBeLessThan(TIMEOUT_MS / 2);
    } finally {
      await t.nodes[0]!.restart();
      await ready(client);
    }
    expect((await timed()).probe.nodes[0]?.state).toBe("up");
  });
});
