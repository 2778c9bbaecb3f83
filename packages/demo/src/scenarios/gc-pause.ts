import { BACKEND_TITLES } from "../backends.js";
import { LocalClient } from "../clients.js";
import { judge } from "../judge.js";
import { PausedClient } from "../paused-client.js";
import { append, clientLane, RunContext, storageLane, updateOf, type RunRecord, type ScenarioEnv } from "./context.js";

export type GcPauseMode = "unfenced" | "fenced";
export const GC_PAUSE_MODES: readonly GcPauseMode[] = ["unfenced", "fenced"];

/** Short, so the demo is quick; the pause is as long as it takes the lock nodes to drop the key. */
const TTL_MS = 1_000;

/**
 * The article's first figure. Client 1 takes the lease, reads the file, checks its lease is still
 * valid — and is stopped (SIGSTOP: its whole process, as in a stop-the-world GC pause). The lease
 * expires on the lock nodes while it is stopped; client 2 acquires, reads, writes. Client 1
 * resumes, still sure of its lease, and writes what it computed before the pause.
 */
export async function gcPause(env: ScenarioEnv, mode: GcPauseMode): Promise<RunRecord> {
  const fenced = mode === "fenced";
  const run = { scenario: "gc-pause" as const, backend: env.backendName, mode };
  const lanes = [clientLane(1), { id: "lock", title: "lock (Redis A–E)", kind: "lock" as const }, clientLane(2), storageLane(env)];
  const ctx = new RunContext(env, run, lanes, fenced);
  let c1: PausedClient | undefined;
  let c2: LocalClient | undefined;
  try {
    [c1, c2] = await Promise.all([PausedClient.start(ctx.clientSetup(1)), Promise.resolve(new LocalClient(ctx.clientSetup(2)))]);
    await ctx.seed();

    const lease1 = await c1.acquire(ctx.resource, TTL_MS);
    ctx.acquired(1, lease1, { pid: c1.pid });
    const read1 = await c1.read(ctx.key);
    ctx.read(1, read1, lease1.token);

    const paused = await ctx.pause(1, c1, "right before it writes");
    const expired = await ctx.leaseGone(1, lease1, TTL_MS, ", while client 1 is stopped and cannot notice");

    const lease2 = await c2.acquire(ctx.resource, TTL_MS * 5);
    ctx.acquired(2, lease2);
    const read2 = await c2.read(ctx.key);
    ctx.read(2, read2, lease2.token);
    const doc2 = append(read2.doc, updateOf(2));
    const write2 = await c2.write(ctx.key, doc2);
    ctx.wrote(2, lease2.token, doc2, write2);

    // The write is already in client 1's IPC pipe when it wakes: its next instruction is the write.
    const doc1 = append(read1.doc, updateOf(1));
    const pending = c1.write(ctx.key, doc1);
    const resume = ctx.resume(1, c1, paused);
    const write1 = await pending;
    ctx.wrote(1, lease1.token, doc1, write1);
    await c2.release();
    ctx.released(2, lease2.token);

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
        { what: "client 1 saw its lease valid right before it was stopped", holds: read1.leaseRemainingMs > 0 },
        { what: "client 1's lease expired while it was stopped", holds: paused.event.seq < expired.seq && expired.seq < resume.seq },
        { what: "client 2 got a larger token than client 1", holds: BigInt(lease2.token) > BigInt(lease1.token) },
        { what: "client 2's own write was accepted", holds: write2.accepted },
      ],
    });
    return {
      ...run,
      title: `gc-pause · ${BACKEND_TITLES[env.backendName]} · ${mode}`,
      caption: fenced
        ? "Client 1 is paused past its lease; when it wakes, the storage refuses its older token."
        : "Client 1 is paused past its lease; when it wakes, its write silently overwrites client 2's.",
      lanes,
      events: ctx.tl.events,
      spans: ctx.tl.spans,
      verdict,
    };
  } finally {
    await Promise.allSettled([c1?.close(), c2?.close()]);
    ctx.close();
  }
}
