import { describe, expect, it } from "vitest";
import { check } from "./checker.js";
import type { HistoryEvent } from "./history.js";
import { plotHistory } from "./plot.js";

describe("plot", () => {
  it("draws a lane per worker, the faults where they acted, and the lost write in red", () => {
    const op = (id: string, worker: number, token: string, read: number, t: number): HistoryEvent[] => [
      { type: "invoke", op: id, worker, resource: "r", mono: t, wall: t },
      { type: "read", op: id, worker, resource: "r", token, count: read, head: read === 0 ? null : "x", mono: t + 1, wall: t },
      {
        type: "ok",
        op: id,
        worker,
        resource: "r",
        token,
        holder: `h${id}`,
        read,
        wrote: read + 1,
        writeStart: t + 400,
        mono: t + 401,
        wall: t,
      },
    ];
    const history: HistoryEvent[] = [
      ...op("0.0", 0, "1", 0, 0),
      { type: "nemesis", fault: 0, kind: "pause-in-rmw", target: "worker 0", phase: "start", worker: 0, mono: 2, wall: 2 },
      { type: "nemesis", fault: 1, kind: "kill-redis", target: "redis B", phase: "start", mono: 50, wall: 50 },
      ...op("1.0", 1, "2", 0, 100),
      { type: "nemesis", fault: 1, kind: "kill-redis", target: "redis B", phase: "end", mono: 300, wall: 300 },
      { type: "nemesis", fault: 0, kind: "pause-in-rmw", target: "worker 0", phase: "end", worker: 0, mono: 399, wall: 399 },
      { type: "nemesis", fault: 2, kind: "pause-gateway", target: "gateway", phase: "start", mono: 420, wall: 420 },
      { type: "nemesis", fault: 2, kind: "pause-gateway", target: "gateway", phase: "end", mono: 520, wall: 520 },
      { type: "final", resource: "r", count: 1, log: ["0.0@1"], mono: 600, wall: 600 },
    ];
    const result = check(history);
    expect(result.victims).toEqual(["1.0"]);
    const svg = plotHistory(history, result, { title: "a <test>", ttlMs: 100 });
    expect(svg.startsWith("<svg")).toBe(true);
    expect(svg).toContain("a &lt;test&gt;");
    expect(svg).toContain(">worker 0<");
    expect(svg).toContain(">worker 1<");
    expect(svg).toContain(">redis B<");
    expect(svg).toMatch(/<title>pause-in-rmw: worker 0, 397 ms<\/title>/);
    expect(svg).toMatch(/<title>kill-redis: redis B<\/title>/);
    // The gateway process gets a lane of its own, below the Redis nodes.
    expect(svg).toMatch(/>redis B<[\s\S]*>gateway<[\s\S]*<title>pause-gateway: gateway<\/title>/);
    // The lost write: a red dot in the token panel and a red outline in its lane.
    expect(svg).toMatch(/r="4" fill="#e00000"><title>1\.0 /);
    expect(svg).toMatch(/stroke="#e00000"[^>]*><title>1\.0 ok<\/title>/);
  });
});
