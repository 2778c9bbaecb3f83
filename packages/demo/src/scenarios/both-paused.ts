import { BACKEND_TITLES } from "../backends.js";
import type { WriteOutcome } from "../backends.js";
import { judge, type JudgeInput } from "../judge.js";
import { PausedClient } from "../paused-client.js";
import { append, clientLane, RunContext, storageLane, updateOf, type RunRecord, type ScenarioEnv } from "./context.js";

/**
 * unfenced: plain writes. ratchet-only: fenced writes, nothing else — the case the ratchet cannot see.
 * fence-on-acquire: each client registers its token right after acquiring. version-check: each
 * write is conditional on the version the client read (ifVersion).
 */
export type BothPausedMode = "unfenced" | "ratchet-only" | "fence-on-acquire" | "version-check";
export const BOTH_PAUSED_MODES: readonly BothPausedMode[] = ["unfenced", "ratchet-only", "fence-on-acquire", "version-check"];

const TTL_MS = 1_000;

const CAPTIONS: Record<BothPausedMode, string> = {
  unfenced: "Both clients are paused past their leases and write in token order; client 2's write erases client 1's.",
  "ratchet-only": "The ratchet alone: tokens arrive in increasing order, so both writes pass — and client 1's update is lost.",
  "fence-on-acquire": "Client 2 registered its token on acquiring: client 1's older token is refused before it can write.",
  "version-check": "Each write is conditional on the version read: client 2 read before client 1 wrote, so it is refused.",
};

/**
 * From the article's comment thread: client 1 (token 33) reads and is paused; its lease expires;
 * client 2 (token 34) reads the same version and is paused too; its lease expires. Then client 1
 * writes (33 is the highest the storage has seen: accepted), then client 2 (34 > 33: accepted) —
 * computed from a read that predates client 1's write, so client 1's acknowledged update is gone.
 */
export async function bothPaused(env: ScenarioEnv, mode: BothPausedMode): Promise<RunRecord> {
  const fenced = mode !== "unfenced";
  const register = mode === "fence-on-acquire";
  const conditional = mode === "version-check";
  const run = { scenario: "both-paused" as const, backend: env.backendName, mode };
  const lanes = [clientLane(1), { id: "lock", title: "lock (Redis A–E)", kind: "lock" as const }, clientLane(2), storageLane(env)];
  const ctx = new RunContext(env, run, lanes, fenced);
  let c1: PausedClient | undefined;
  let c2: PausedClient | undefined;
  try {
    [c1, c2] = await Promise.all([PausedClient.start(ctx.clientSetup(1)), PausedClient.start(ctx.clientSetup(2))]);
    await ctx.seed();

    const lease1 = await c1.acquire(ctx.resource, TTL_MS);
    ctx.acquired(1, lease1, { pid: c1.pid });
    const registered1 = register ? await c1.register() : undefined;
    if (registered1 !== undefined) ctx.registered(1, lease1.token, registered1);
    const read1 = await c1.read(ctx.key);
    ctx.read(1, read1, lease1.token);
    const paused1 = await ctx.pause(1, c1, "before it writes");
    const expired1 = await ctx.leaseGone(1, lease1, TTL_MS, "");

    const lease2 = await c2.acquire(ctx.resource, TTL_MS);
    ctx.acquired(2, lease2, { pid: c2.pid });
    const registered2 = register ? await c2.register() : undefined;
    if (registered2 !== undefined) ctx.registered(2, lease2.token, registered2);
    const read2 = await c2.read(ctx.key);
    ctx.read(2, read2, lease2.token);
    const paused2 = await ctx.pause(2, c2, "before it writes: now both clients are stopped");
    const expired2 = await ctx.leaseGone(2, lease2, TTL_MS, "; both clients are now stale holders");

    // They wake in token order, each going straight on to the write it was about to make.
    const doc1 = append(read1.doc, updateOf(1));
    const ifVersion1 = conditional ? read1.version : undefined;
    const pending1 = c1.write(ctx.key, doc1, ifVersion1);
    const resumed1 = ctx.resume(1, c1, paused1);
    const write1 = await pending1;
    ctx.wrote(1, lease1.token, doc1, write1, ifVersion1);

    const doc2 = append(read2.doc, updateOf(2));
    const ifVersion2 = conditional ? read2.version : undefined;
    const pending2 = c2.write(ctx.key, doc2, ifVersion2);
    ctx.resume(2, c2, paused2);
    const write2 = await pending2;
    ctx.wrote(2, lease2.token, doc2, write2, ifVersion2);

    const writes = [
      { client: "client 1", entry: updateOf(1), outcome: write1 },
      { client: "client 2", entry: updateOf(2), outcome: write2 },
    ];
    const final = await ctx.final(writes);
    const verdict = judge({
      expected: mode === "unfenced" || mode === "ratchet-only" ? "anomaly" : "protected",
      writes,
      final: final.doc,
      ...mustRefuse(mode),
      preconditions: [
        { what: "client 1's lease expired while it was stopped", holds: paused1.event.seq < expired1.seq && expired1.seq < resumed1.seq },
        { what: "client 2's lease expired while it was stopped", holds: paused2.event.seq < expired2.seq },
        { what: "both clients read the same file", holds: read1.doc.entries.join() === read2.doc.entries.join() },
        { what: "client 2 got a larger token than client 1", holds: BigInt(lease2.token) > BigInt(lease1.token) },
        ...(register ? [{ what: "both registrations were accepted", holds: accepted(registered1) && accepted(registered2) }] : []),
      ],
    });
    return {
      ...run,
      title: `both-paused · ${BACKEND_TITLES[env.backendName]} · ${mode}`,
      caption: CAPTIONS[mode],
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

function accepted(outcome: WriteOutcome | undefined): boolean {
  return outcome?.accepted === true;
}

function mustRefuse(mode: BothPausedMode): Pick<JudgeInput, "mustRefuse"> {
  if (mode === "fence-on-acquire") return { mustRefuse: { client: "client 1", error: "StaleTokenError" } };
  if (mode === "version-check") return { mustRefuse: { client: "client 2", error: "VersionMismatchError" } };
  return {};
}
