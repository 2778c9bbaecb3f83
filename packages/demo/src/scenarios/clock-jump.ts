import { BACKEND_TITLES } from "../backends.js";
import { resourceKeys } from "@fenced/lock";
import { LocalClient, type LeaseInfo } from "../clients.js";
import { judge } from "../judge.js";
import type { DemoEvent, Lane, Span } from "../timeline.js";
import { append, clientLane, RunContext, storageLane, updateOf, type RunRecord, type ScenarioEnv } from "./context.js";

export type ClockJumpMode = "unfenced" | "fenced";
export const CLOCK_JUMP_MODES: readonly ClockJumpMode[] = ["unfenced", "fenced"];

const TTL_MS = 3_000;
/** Far enough past the TTL that node C drops every lease key it holds at once. */
const JUMP_MS = 2 * TTL_MS;
/** How long D and E stay out of client 1's reach: just over its acquire. */
const CUT_OFF_MS = 400;
const NODES = ["A", "B", "C", "D", "E"] as const;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * The article's Redlock example, on five real redis-server processes; C runs under a clock shim.
 * Client 1 gets A, B, C (D and E are out of its reach); C's wall clock jumps forward and C drops
 * client 1's key early (Redis expires keys by wall clock); client 2 then gets C, D, E. Both hold a
 * valid lease by their own clocks; both write.
 */
export async function clockJump(env: ScenarioEnv, mode: ClockJumpMode): Promise<RunRecord> {
  const fenced = mode === "fenced";
  const nodeC = env.lock.nodes[2];
  if (nodeC === undefined || env.lock.nodes.length !== 5) throw new Error("clock-jump needs exactly five lock nodes");
  const run = { scenario: "clock-jump" as const, backend: env.backendName, mode };
  const nodeLanes: Lane[] = NODES.map((n) => ({ id: `node-${n}`, title: n === "C" ? "Redis C (clock shim)" : `Redis ${n}`, kind: "node" }));
  const lanes = [clientLane(1), ...nodeLanes, clientLane(2), storageLane(env)];
  const ctx = new RunContext(env, run, lanes, fenced);
  const { lease: leaseKey } = resourceKeys(ctx.resource);
  const c1 = new LocalClient(ctx.clientSetup(1));
  const c2 = new LocalClient(ctx.clientSetup(2));
  const held = new Map<string, Span>();

  /** Which nodes hold this lease's key now, and a bar on each of their lanes from this event on. */
  const holders = async (info: LeaseInfo): Promise<string[]> => {
    const values = await Promise.all(ctx.admin.map((r) => r.get(leaseKey)));
    return NODES.filter((_, i) => values[i] === info.value);
  };
  const markHeld = (at: DemoEvent, n: 1 | 2, nodes: readonly string[], token: string): void => {
    for (const node of nodes)
      held.set(`${node}/${n}`, ctx.tl.open(at, { lane: `node-${node}`, kind: "held", label: `client ${n} · ${token}`, client: n }));
  };

  try {
    await ctx.seed();

    // A partition that keeps client 1 from D and E, played by a key there that makes them refuse it.
    await Promise.all(ctx.admin.slice(3).map((r) => r.set(leaseKey, "out of client 1's reach", "PX", CUT_OFF_MS)));
    const cut = ctx.tl.event({
      kind: "partition",
      lane: "node-D",
      label: "D, E: out of client 1's reach",
      message: "client 1 cannot reach D and E (a network partition)",
    });
    const cutSpans = ["D", "E"].map((n) => ctx.tl.open(cut, { lane: `node-${n}`, kind: "cut-off", label: "unreachable for client 1" }));

    const lease1 = await c1.acquire(ctx.resource, TTL_MS);
    const on1 = await holders(lease1);
    markHeld(ctx.acquired(1, lease1, { from: "node-A", where: on1.join(", ") }), 1, on1, lease1.token);
    const read1 = await c1.read(ctx.key);
    ctx.read(1, read1, lease1.token);

    nodeC.setClockOffsetMs(JUMP_MS);
    const jumpDeadline = Date.now() + 3_000;
    while ((await holders(lease1)).includes("C")) {
      if (Date.now() > jumpDeadline) throw new Error("node C did not drop client 1's key after its clock jumped");
      await sleep(5);
    }
    const jumped = ctx.tl.event({
      kind: "clock-jump",
      lane: "node-C",
      label: `clock +${JUMP_MS / 1000} s: key dropped`,
      message: `node C's wall clock jumps ${JUMP_MS / 1000} s forward; Redis expires keys by wall clock, so C drops client 1's key early`,
    });
    ctx.tl.close(held.get("C/1"), jumped);

    const healDeadline = Date.now() + CUT_OFF_MS + 3_000;
    while ((await Promise.all(ctx.admin.slice(3).map((r) => r.exists(leaseKey)))).some((x) => x === 1)) {
      if (Date.now() > healDeadline) throw new Error("D and E did not come free");
      await sleep(10);
    }
    const healed = ctx.tl.event({ kind: "heal", lane: "node-E", label: "D, E reachable", message: "D and E are reachable again" });
    for (const s of cutSpans) ctx.tl.close(s, healed);

    const lease2 = await c2.acquire(ctx.resource, TTL_MS);
    const on2 = await holders(lease2);
    markHeld(ctx.acquired(2, lease2, { from: "node-E", where: on2.join(", ") }), 2, on2, lease2.token);

    const [left1, left2] = await Promise.all([c1.leaseRemainingMs(), c2.leaseRemainingMs()]);
    ctx.tl.event({
      kind: "both-hold",
      lane: "client-1",
      to: "client-2",
      label: "both believe they hold the lock",
      message: `both clients believe they hold the lock: client 1 for ${left1} ms more (A, B still hold its key), client 2 for ${left2} ms`,
    });

    const read2 = await c2.read(ctx.key);
    ctx.read(2, read2, lease2.token);
    const doc2 = append(read2.doc, updateOf(2));
    const write2 = await c2.write(ctx.key, doc2);
    ctx.wrote(2, lease2.token, doc2, write2);
    const stillBelieves = (await c1.leaseRemainingMs()) > 0;
    const doc1 = append(read1.doc, updateOf(1));
    const write1 = await c1.write(ctx.key, doc1);
    ctx.wrote(1, lease1.token, doc1, write1);

    await Promise.all([c1.release(), c2.release()]);
    const end = ctx.released(1, lease1.token, "node-A");
    const end2 = ctx.released(2, lease2.token, "node-E");
    for (const [k, span] of held) ctx.tl.close(span, k.endsWith("/1") ? end : end2);

    const writes = [
      { client: "client 2", entry: updateOf(2), outcome: write2 },
      { client: "client 1", entry: updateOf(1), outcome: write1 },
    ];
    const final = await ctx.final(writes);
    const verdict = judge({
      expected: fenced ? "protected" : "anomaly",
      writes,
      final: final.doc,
      ...(fenced ? { mustRefuse: { client: "client 1", error: "StaleTokenError" as const } } : {}),
      preconditions: [
        { what: "client 1 held A, B, C", holds: on1.join() === "A,B,C" },
        { what: "client 2 held C, D, E", holds: on2.join() === "C,D,E" },
        { what: "both clients believed they held the lock at once", holds: left1 > 0 && left2 > 0 },
        { what: "client 1 still believed it held the lock when it wrote", holds: stillBelieves },
        { what: "client 2 got a larger token than client 1", holds: BigInt(lease2.token) > BigInt(lease1.token) },
      ],
    });
    return {
      ...run,
      title: `clock-jump · ${BACKEND_TITLES[env.backendName]} · ${mode}`,
      caption: fenced
        ? "Node C's clock jumps; two clients hold the lock at once, and the storage refuses the older token."
        : "Node C's clock jumps; two clients hold the lock at once, and the older one's write clobbers the newer.",
      lanes,
      events: ctx.tl.events,
      spans: ctx.tl.spans,
      verdict,
    };
  } finally {
    nodeC.setClockOffsetMs(0);
    await Promise.allSettled([c1.close(), c2.close()]);
    ctx.close();
  }
}
