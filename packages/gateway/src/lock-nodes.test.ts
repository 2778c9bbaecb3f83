import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { LockNodeStates } from "./ops/lock-nodes.js";

/**
 * A lock node's state has one source of truth, whatever answered last: a readiness probe's PING or a
 * lease script. The decision alone here (the servers' side: metrics.test.ts, "without lease traffic").
 */
function states(): { states: LockNodeStates; up: Map<number, boolean>; changes: () => unknown[][] } {
  const up = new Map<number, boolean>();
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
  const s = new LockNodeStates(["a:1", "b:2", undefined], (node, isUp) => up.set(node, isUp), logger);
  return { states: s, up, changes: () => lines.map((l) => [l.level, l.msg, l.node, l.state, l.address]) };
}
const probe = (...nodes: ("up" | "pending" | "refused" | "timeout" | "error")[]) => ({
  ok: true,
  quorum: 2,
  nodes: nodes.map((state, node) => ({ node, state })),
});

describe("LockNodeStates", () => {
  it("whatever answered last, probe or lease script, sets the series; a pending node changes nothing", () => {
    const { states: s, up, changes } = states();
    s.probed(probe("up", "pending", "refused"), s.mark());
    expect([...up]).toEqual([
      [0, true],
      [2, false],
    ]);
    // A lease script's answer after the probe's refusal: node 2 is up; then a probe finds it down again.
    s.result({ node: 2, phase: "acquire", ms: 1 });
    expect(up.get(2)).toBe(true);
    s.result({ node: 1, phase: "acquire", ms: 200, failure: { node: 1, reason: "timeout" } });
    expect(up.get(1)).toBe(false);
    s.probed(probe("up", "up", "timeout"), s.mark());
    expect([up.get(0), up.get(1), up.get(2)]).toEqual([true, true, false]);
    expect(changes()).toEqual([
      [40, "lock node down", 2, "refused", "unknown"],
      [40, "lock node answers again", 2, "up", "unknown"],
      [40, "lock node down", 1, "timeout", "b:2"],
      [40, "lock node answers again", 1, "up", "b:2"],
      [40, "lock node down", 2, "timeout", "unknown"],
    ]);
  });

  it("a probe's answer does not undo a lease script's that came after the probe started: no flapping pair", () => {
    const { states: s, up, changes } = states();
    s.probed(probe("up", "up", "up"), s.mark());
    // A probe starts; node 1 answers PONG early, but the probe ends only later (a silent node holds it).
    const since = s.mark();
    // Meanwhile a lease script finds node 1 down.
    s.result({ node: 1, phase: "acquire", ms: 200, failure: { node: 1, reason: "timeout" } });
    // The probe ends: its PONG for node 1 is older than that failure, and is not applied; node 2's is.
    s.probed(probe("up", "up", "timeout"), since);
    expect([up.get(0), up.get(1), up.get(2)]).toEqual([true, false, false]);
    expect(changes()).toEqual([
      [40, "lock node down", 1, "timeout", "b:2"],
      [40, "lock node down", 2, "timeout", "unknown"],
    ]);
    // A probe started after the failure applies as any answer does.
    s.probed(probe("up", "up", "up"), s.mark());
    expect(up.get(1)).toBe(true);
  });

  it("one line per change between up and down: a node down for another reason, or seen up again and again, says nothing more", () => {
    const { states: s, changes } = states();
    s.probed(probe("up", "up", "up"), s.mark());
    s.probed(probe("refused", "up", "up"), s.mark());
    s.result({
      node: 0,
      phase: "release",
      ms: 0,
      failure: { node: 0, reason: "refused", code: "ECONNREFUSED", detail: "connect ECONNREFUSED" },
    });
    s.probed(probe("timeout", "up", "up"), s.mark());
    s.result({ node: 7, phase: "acquire", ms: 0 });
    expect(changes()).toEqual([[40, "lock node down", 0, "refused", "a:1"]]);
  });
});
