// The gateway under overload, open loop. Two gateway processes of the same build on one PostgreSQL
// (fsync off): one with admission control off (ADMISSION_OFF_FLAGS), one with it on (the default).
// Credential writes by ordinary API keys over 64 resources, sent by a load generator in a process of
// its own (open-loop.ts); each phase is run by overload-phase.ts. Each server under test (the two
// gateways, the shedding anchor) runs in a CPU-quota cgroup of its own (BENCH_CPU_QUOTA, default half
// a core; server-process.ts). JSON lines on stdout:
// - overload-cpu-quota: the cgroup version and quota used;
// - overload-capacity: closed loop at saturation (64 keep-alive clients), median of interleaved
//   rounds, writes/s; each round's quota applied after 1 s of the same loop uncapped; its goal line:
//   admission on ÷ off;
// - overload-open-loop-capacity: measured next, before any open-loop phase: the writes/s the quota
//   carries at the CPU per answer of paced writes (0.5× the closed loop's capacity, interleaved
//   rounds), beside the closed loop's cost; the admission-off gateway's is the capacity every
//   open-loop rate below is a multiple of (a write sent on its own costs a server about twice what
//   it costs in a closed loop: no server that answers every request keeps the closed loop's rate);
// - overload-open-loop: each gateway at 0.5×, 1×, 2×, 4× and 10× that capacity, sent on a fixed schedule
//   whatever the answers, each write timed from its scheduled send: offered, accepted, shed and other
//   answers per second, latency, the gateway's RSS and CPU, the generator's own lag;
// - overload-goal: nothing refused at 0.5×; goodput (accepted ÷ the open loop's capacity) ≥ 0.85 at
//   2×, 0.6 at 4×, reported at 10×; p99 of accepted ≤ 5× its value at 0.5× (2×, 4×); every answer
//   within the store deadline; RSS flat through the phase (overload-goals.ts); a closed loop of 1,024,
//   on ÷ off ≥ 0.9;
// - overload-fairness: one key at 4× and another at 0.25× on the admission gateway: the small key's
//   accepted share (≥ 0.9) and its p99 against its own alone (≤ 3×);
// - overload-refusal-cost: the gateway's CPU per shed answer by the residual at 4× (accepted writes at
//   the paced cost) against per accepted write, and against node:http's 503 in the same load (≤ it + 10 µs);
// - overload-refusal-isolated: the same, measured directly (overload-refusal.ts): a gateway that
//   refuses every write but one, by the slope between a closed loop of 64 and one of 1,024, against
//   node:http answering 503 at the rates the gateway answered (the same slope) and as fast as it can;
// - overload-anchor, overload-anchor-fairness: the same loads against bare node:http answering at once
//   (overload-anchors.ts), 200 and 503: the latency and fairness this setup gives a server with no
//   work, and the floor of a refusal's CPU, which the gateway's figures are read against;
// - overload-anchor-shed-capacity, overload-anchor-shed: the simplest shedding server (node:http + pg,
//   writes over its pool's size in flight refused at once; overload-anchor-shed.ts) at the same
//   multiples of its own capacity; overload-accepted-vs-anchor: the gateway's goodput at 2×, 4× and
//   10× against that anchor's.
// Every process (benchmark, generators, gateways, PostgreSQL) shares this machine's cores.
import { randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import { availableParallelism, loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { mintFenceCredential, type CredentialKey } from "@fenced/fence/credentials";
import { startPostgres } from "@fenced/servers";
import { emit, median, round3 } from "./measure.js";
import { startGenerator, type Generator, type Job, type JobResult } from "./open-loop.js";
import { runShedAnchor } from "./overload-anchor-shed.js";
import { runAnchors } from "./overload-anchors.js";
import { emitOpenGoals, emitOpenMedians, FAIRNESS, FAIRNESS_LOADS, FRACTIONS, openLoopCapacity } from "./overload-goals.js";
import {
  ceilings,
  measureRefusals,
  ONE_SLOT_FLAGS,
  REFUSAL_SLACK_US,
  refusalCostFigures,
  type RefusalContext,
} from "./overload-refusal.js";
import { cpuUsPerAnswer, openFigures, perSec, phase, schedule, type Load, type Measured } from "./overload-phase.js";
import { cpuQuotaSetting, gatewayArgs, nodeArgs, type ServerProcess, startServer } from "./server-process.js";
import type { Sample } from "./gateway-watch.js";

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 5_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/** The flags of the gateway without admission control (run without them while the gateway has no such flag). */
const ADMISSION_OFF_FLAGS: readonly string[] = ["--no-admission"];
/** Extra flags for the gateway with admission control, to compare its settings (e.g. "--max-event-loop-delay-ms 50"). */
const ADMISSION_ON_FLAGS: readonly string[] = (process.env.BENCH_ADMISSION_FLAGS ?? "").split(" ").filter((f) => f !== "");
/** Extra node flags for both gateway processes, as `pnpm bench gateway` takes them (e.g. "--cpu-prof --cpu-prof-dir=/tmp/gw"). */
const NODE_ARGS = nodeArgs("BENCH_GATEWAY_NODE_ARGS");
const RESOURCES = 64;
const CLIENTS = 64;
/** The open loop's sockets at most: enough that the generator never waits for one at these rates (a wait would count). */
const SOCKETS = 2_048;
const SMALL_SOCKETS = 1_024;
/** The cores each server under test gets, in a cgroup of its own (BENCH_CPU_QUOTA; 0: uncapped). */
const CPU_QUOTA = cpuQuotaSetting(0.5);
/** The CPU a server's one event loop gets, in cores: its quota, and never more than one core. */
const CPU_CORES_SERVED = CPU_QUOTA > 0 ? Math.min(CPU_QUOTA, 1) : 1;
/** The closed loop larger than the limit and the queue hold: some refusals by design. */
const BIG_CLOSED = 1_024;
/** Its goodput, admission on ÷ off, at least. */
const BIG_CLOSED_GOAL = 0.9;
/** The small key beside the flood (FAIRNESS): the share of its writes accepted, and its p99 ÷ its p99 alone. */
const FAIRNESS_GOALS = { share: 0.9, p99: 3 } as const;
/** The paced phases that measure the open loop's capacity: this share of the closed loop's, below saturation. */
const PACED_OF_CLOSED = 0.5;
/** Each capped phase of a closed loop follows this much of the same loop uncapped (a limit or a noisy neighbour arriving). */
const UNCAPPED_WARM_MS = 1_000;
/** The gateway's default --store-timeout-ms: no answer should take longer, shed or not. */
const STORE_DEADLINE_MS = 5_000;
/** After the last scheduled send, answers are waited for this long; writes still out then are unanswered. */
const DRAIN_LIMIT_MS = 3 * STORE_DEADLINE_MS;
/** BENCH_GATEWAY_CLI: another build's cli.js to measure (e.g. a copy of an earlier dist), for before/after runs. */
const CLI = process.env.BENCH_GATEWAY_CLI ?? fileURLToPath(new URL("../packages/gateway/dist/cli.js", import.meta.url));
/**
 * BENCH_PHASES: the phases to run, comma-separated, of "open", "closed1024", "fairness", "anchors",
 * "refusal" (by the residual of the open loop's phases) and "isolated" (a refusal measured alone)
 * (default all); capacity is always measured (every rate is a multiple of it).
 */
const PHASES = new Set((process.env.BENCH_PHASES ?? "open,closed1024,fairness,anchors,refusal,isolated").split(","));
const FENCE_KEY: CredentialKey = { id: "bench", secret: randomBytes(32) };
/** Two ordinary API keys, each with its own resources and records. */
const KEYS = {
  big: { id: "big", key: "big-key-0123456789abcdef", resources: "overload/big/", records: "ovl/big/" },
  small: { id: "small", key: "small-key-0123456789abcdef", resources: "overload/small/", records: "ovl/small/" },
} as const;
type Side = "off" | "on";

// Whether this build has the flags; without them the "off" gateway is the same as the other, and every line says so.
const help = execFileSync(process.execPath, [CLI, "--help"]).toString();
const offFlagExists = ADMISSION_OFF_FLAGS.every((flag) => help.includes(flag));
const offFlags = offFlagExists ? ADMISSION_OFF_FLAGS : [];
// One generator for each API key, each a process of its own (it exits with this one: its IPC channel closes).
const big = await startGenerator();
const small = await startGenerator();
const generators: Generator[] = [big, small];
const setting = {
  server: "throwaway PostgreSQL (fsync=off, synchronous_commit=off)",
  writes: `credential PUT /v1/records by an ordinary API key over ${RESOURCES} resources`,
  generator: "a child process of its own: undici Clients, one write at a time on each connection",
  generatorPriority: big.priority,
  cores: availableParallelism(),
  admissionOnFlags: ADMISSION_ON_FLAGS.join(" "),
  cpuQuota:
    CPU_QUOTA > 0
      ? `each server in a cgroup of its own, ${CPU_QUOTA} of a core (CFS quota per 100 ms period), ahead of the machine's other processes`
      : "uncapped (BENCH_CPU_QUOTA=0): the figures are the machine's, not the servers'",
  admissionOff: offFlagExists
    ? `the "off" gateway runs with ${ADMISSION_OFF_FLAGS.join(" ")}`
    : `this gateway has no ${ADMISSION_OFF_FLAGS.join(" ")}: both gateways run with admission as built (the same)`,
};

/** A gateway of this build on `postgresUrl`: admission off or on as `side` says, or with `flags` of its own (records under `schema`). */
function startGateway(postgresUrl: string, side: Side | "one-slot"): Promise<ServerProcess> {
  const flags = side === "off" ? offFlags : side === "on" ? ADMISSION_ON_FLAGS : [...ONE_SLOT_FLAGS, "--store-timeout-ms", "600000"];
  return startServer(
    [...NODE_ARGS, CLI, ...gatewayArgs(postgresUrl, `bench_overload_${side.replace("-", "_")}`), ...flags],
    {
      FENCED_GATEWAY_API_KEYS: JSON.stringify(
        Object.values(KEYS).map((k) => ({ id: k.id, key: k.key, resources: [k.resources], keys: [k.records] })),
      ),
      FENCED_GATEWAY_FENCE_KEYS: JSON.stringify([{ id: FENCE_KEY.id, secret: Buffer.from(FENCE_KEY.secret).toString("base64") }]),
    },
    CPU_QUOTA,
  );
}

/** Key `which`'s writes: one credential per resource, record w under resource w. */
function writesOf(which: keyof typeof KEYS): Pick<Job, "apiKey" | "keyPrefix" | "credentials"> {
  const k = KEYS[which];
  const credentials = Array.from({ length: RESOURCES }, (_, w) =>
    mintFenceCredential({ resource: `${k.resources}${w}`, token: 1n, holder: `${k.id}-${w}` }, FENCE_KEY, {
      expiresAt: Date.now() + 86_400_000,
    }),
  );
  return { apiKey: k.key, keyPrefix: k.records, credentials };
}

// Faults: the isolated refusal's rounds stop it (SIGSTOP) to hold a write.
const postgres = await startPostgres({ faults: true });
const gateways: Partial<Record<Side | "oneSlot", ServerProcess>> = {};
try {
  gateways.off = await startGateway(postgres.url, "off");
  gateways.on = await startGateway(postgres.url, "on");
  const gw = gateways as Record<Side, ServerProcess>;
  const bigWrites = writesOf("big");
  const smallWrites = writesOf("small");
  const closed: Load = { generator: big, job: { mode: "closed", ratePerSec: 0, connections: CLIENTS, ...bigWrites } };
  const open = (generator: Generator, ratePerSec: number, writes: typeof bigWrites, connections = SOCKETS): Load => ({
    generator,
    job: { mode: "open", ratePerSec, connections, ...writes },
  });

  // A fresh gateway runs at about half speed until V8 has optimised its hot paths: warm both first (uncapped).
  for (const side of ["off", "on"] as const) {
    gw[side].quota?.uncap();
    await phase(gw[side], [closed], Math.min(3_000, 2 * DURATION_MS), DRAIN_LIMIT_MS);
    gw[side].quota?.cap(CPU_QUOTA);
  }
  const quotaNote = gw.on.quota === undefined ? "none" : `cgroup ${gw.on.quota.version}, ${CPU_QUOTA} core`;
  emit({ bench: "overload-cpu-quota", ...setting, cgroup: quotaNote });
  /** A closed loop's phase, capped after the same loop ran uncapped (UNCAPPED_WARM_MS). */
  const cappedClosed = async (server: ServerProcess, load: Load, watch = false): Promise<Measured> => {
    server.quota?.uncap();
    await phase(server, [load], UNCAPPED_WARM_MS, DRAIN_LIMIT_MS);
    server.quota?.cap(CPU_QUOTA);
    return phase(server, [load], DURATION_MS, DRAIN_LIMIT_MS, { watch });
  };
  // The small key's generator too, whose first phase is the fairness baseline.
  await phase(gw.on, [{ generator: small, job: { ...closed.job, ...smallWrites } }], 1_000, DRAIN_LIMIT_MS);

  // 1. Capacity: the closed loop at saturation, the two gateways in alternating order.
  const capacityRounds: Record<
    Side,
    {
      writesPerSec: number;
      cpuUsPerWrite: number;
      other: Record<string, number>;
      gatewayCores: number;
      loadAverage: number;
      machineBusyCores: number;
      listenOverflows: number;
    }[]
  > = {
    off: [],
    on: [],
  };
  for (let round = 0; round < ROUNDS; round++) {
    for (const side of round % 2 === 0 ? (["off", "on"] as const) : (["on", "off"] as const)) {
      const m = await cappedClosed(gw[side], closed);
      const r = m.results[0] as JobResult;
      capacityRounds[side].push({
        writesPerSec: perSec(r.accepted, r),
        cpuUsPerWrite: cpuUsPerAnswer(m),
        other: { ...r.other, ...(r.shed > 0 ? { shed: r.shed } : {}) },
        gatewayCores: m.gatewayCores,
        loadAverage: m.loadAverage,
        machineBusyCores: m.machineBusyCores,
        listenOverflows: m.listenOverflows,
      });
    }
  }
  const capacityOf = (side: Side): number => median(capacityRounds[side].map((r) => r.writesPerSec));
  const cpuPerWriteOf = (side: Side): number => median(capacityRounds[side].map((r) => r.cpuUsPerWrite));
  // The rates are multiples of the gateway without admission control: what the gateway itself can do.
  const capacity = capacityOf("off");
  emit({
    bench: "overload-capacity",
    ...setting,
    writesPerSec: capacity,
    of: `admission-off gateway, closed loop, ${CLIENTS} keep-alive clients, median of ${ROUNDS} interleaved rounds of ${DURATION_MS} ms`,
    goal: "(reported): every rate below is a multiple of it",
    admissionOnWritesPerSec: capacityOf("on"),
    cpuUsPerWrite: { off: cpuPerWriteOf("off"), on: cpuPerWriteOf("on") },
    rounds: capacityRounds,
  });
  const closedRatios = capacityRounds.on.map((r, i) => round3(r.writesPerSec / (capacityRounds.off[i]?.writesPerSec ?? Number.NaN)));
  const closedMedian = round3(capacityOf("on") / capacity);
  emit({
    bench: "overload-goal",
    figure: `closed loop of ${CLIENTS}: accepted/s, admission on ÷ off`,
    value: closedMedian,
    goal: ">= 0.95 (medians), no round under 0.9",
    met: closedMedian >= 0.95 && Math.min(...closedRatios) >= 0.9,
    rounds: closedRatios,
    shedPerRound: capacityRounds.on.map((r) => r.other.shed ?? 0),
  });

  // 2. The open loop's capacity, before any open-loop phase: paced writes below saturation, the two
  // gateways interleaved; every open-loop rate below is a multiple of the admission-off gateway's.
  const pacedRate = Math.max(50, Math.round(capacity * PACED_OF_CLOSED));
  const paced: Record<Side, number[]> = { off: [], on: [] };
  for (let round = 0; round < ROUNDS; round++)
    for (const side of round % 2 === 0 ? (["off", "on"] as const) : (["on", "off"] as const))
      paced[side].push(cpuUsPerAnswer(await phase(gw[side], [open(big, pacedRate, bigWrites)], DURATION_MS, DRAIN_LIMIT_MS)));
  const openCapacities = openLoopCapacity(
    paced,
    { on: cpuPerWriteOf("on"), off: cpuPerWriteOf("off") },
    capacity,
    CPU_CORES_SERVED,
    pacedRate,
  );
  const openCapacity = openCapacities.off.capacity;

  // 3. Open loop at each multiple of the open loop's capacity, the two gateways in alternating order.
  const openRounds: Record<Side, Partial<Record<(typeof FRACTIONS)[number], Measured>>>[] = [];
  for (let round = 0; round < (PHASES.has("open") || PHASES.has("anchors") || PHASES.has("refusal") ? ROUNDS : 0); round++) {
    const runs: Record<Side, Partial<Record<(typeof FRACTIONS)[number], Measured>>> = { off: {}, on: {} };
    openRounds.push(runs);
    for (const [k, fraction] of FRACTIONS.entries()) {
      const rate = Math.max(50, Math.round(openCapacity * fraction));
      for (const side of k % 2 === 0 ? (["off", "on"] as const) : (["on", "off"] as const)) {
        const m = await phase(gw[side], [open(big, rate, bigWrites)], DURATION_MS, DRAIN_LIMIT_MS, { watch: side === "on", served: true });
        runs[side][fraction] = m;
        const r = m.results[0] as JobResult;
        emit({
          bench: "overload-open-loop",
          ...setting,
          round,
          admission: side,
          fraction,
          ratePerSec: rate,
          durationMs: DURATION_MS,
          sockets: SOCKETS,
          ...openFigures(r),
          gatewayRssStartMb: m.rssStartMb,
          gatewayRssEndMb: m.rssEndMb,
          gatewayRssPeakMb: m.rssPeakMb,
          gatewayRssAfterDrainMb: m.rssAfterMb,
          gatewayCpuUsPerAnswer: cpuUsPerAnswer(m),
          gatewayCores: m.gatewayCores,
          loadAverage: m.loadAverage,
          machineBusyCores: m.machineBusyCores,
          listenOverflows: m.listenOverflows,
          settledMs: m.settledMs,
          ...(m.timeline === undefined ? {} : { admissionTimeline: m.timeline }),
        });
      }
    }
    emitOpenGoals(runs, openCapacity, STORE_DEADLINE_MS, round);
  }
  if (openRounds.length > 0) emitOpenMedians(openRounds, openCapacity);
  const runs = openRounds[0];

  // The closed loop larger than the limit and the queue hold, capped after an uncapped start, interleaved.
  const big1024: Load = { generator: big, job: { ...closed.job, connections: BIG_CLOSED } };
  const bigClosed: Record<Side, JobResult[]> = { on: [], off: [] };
  const bigTimelines: (Sample[] | undefined)[] = [];
  for (let round = 0; round < (PHASES.has("closed1024") ? ROUNDS : 0); round++)
    for (const side of round % 2 === 0 ? (["on", "off"] as const) : (["off", "on"] as const)) {
      const m = await cappedClosed(gw[side], big1024, side === "on");
      bigClosed[side].push(m.results[0] as JobResult);
      if (side === "on") bigTimelines.push(m.timeline);
    }
  if (PHASES.has("closed1024")) {
    const rate = (r: JobResult): number => perSec(r.accepted, r);
    const bigRatio = round3(median(bigClosed.on.map(rate)) / median(bigClosed.off.map(rate)));
    emit({
      bench: "overload-goal",
      figure: `closed loop of ${BIG_CLOSED}: accepted/s, admission on ÷ off (medians of ${ROUNDS} interleaved rounds)`,
      value: bigRatio,
      goal: `>= ${BIG_CLOSED_GOAL}`,
      met: bigRatio >= BIG_CLOSED_GOAL,
      rounds: bigClosed.on.map((r, i) => round3(rate(r) / rate(bigClosed.off[i] as JobResult))),
      loadAverage: loadavg()[0],
      on: bigClosed.on.map(openFigures),
      off: bigClosed.off.map(openFigures),
      admissionTimelines: bigTimelines,
    });
  }
  // The anchors: the same loads against bare node:http answering at once.
  const anchorLoad = (key: "big" | "small", rate: number): Load =>
    key === "big" ? open(big, rate, bigWrites) : open(small, rate, smallWrites, SMALL_SOCKETS);
  const anchors =
    !PHASES.has("anchors") && !PHASES.has("refusal") ? undefined : await runAnchors(anchorLoad, openCapacity, DURATION_MS, DRAIN_LIMIT_MS);
  const anchorAt = !PHASES.has("anchors")
    ? undefined
    : await runShedAnchor({
        cpuQuota: CPU_QUOTA,
        postgresUrl: postgres.url,
        apiKey: KEYS.big.key,
        closed,
        open: (rate) => open(big, rate, bigWrites),
        rounds: ROUNDS,
        durationMs: DURATION_MS,
        drainLimitMs: DRAIN_LIMIT_MS,
      });
  const gatewayAt = (side: Side, fraction: 2 | 4 | 10): number => {
    const r = (runs?.[side][fraction] as Measured).results[0] as JobResult;
    return round3(perSec(r.acceptedInWindow, r) / openCapacity);
  };
  for (const fraction of anchorAt === undefined || runs === undefined ? [] : ([2, 4, 10] as const)) {
    emit({
      bench: "overload-accepted-vs-anchor",
      ...setting,
      figure: `goodput (accepted ÷ the open loop's capacity) at ${fraction}×`,
      fraction,
      gateway: gatewayAt("on", fraction),
      gatewayAdmissionOff: gatewayAt("off", fraction),
      anchor: anchorAt?.[fraction],
      ratio: round3(gatewayAt("on", fraction) / (anchorAt?.[fraction] ?? Number.NaN)),
      ratioOf:
        "the admission gateway's goodput ÷ the shedding anchor's (overload-anchor-shed), each against its own capacity under the same quota, in this run",
      goal: ">= 1",
      met: gatewayAt("on", fraction) >= (anchorAt?.[fraction] ?? Number.POSITIVE_INFINITY),
    });
  }

  // 3. Fairness on the admission gateway: the small key alone, then beside the big key (rounds).
  const smallRate = Math.max(50, Math.round(openCapacity * FAIRNESS.small));
  const bigRate = Math.round(openCapacity * FAIRNESS.big);
  const fairRounds: { ratio: number; share: number; aloneP99Ms: number; besideP99Ms: number }[] = [];
  for (let round = 0; round < (PHASES.has("fairness") ? ROUNDS : 0); round++) {
    const alone = (await phase(gw.on, [open(small, smallRate, smallWrites, SMALL_SOCKETS)], DURATION_MS, DRAIN_LIMIT_MS))
      .results[0] as JobResult;
    const both = await phase(
      gw.on,
      [open(big, bigRate, bigWrites), open(small, smallRate, smallWrites, SMALL_SOCKETS)],
      DURATION_MS,
      DRAIN_LIMIT_MS,
      { watch: true },
    );
    const [bigR, smallR] = both.results as [JobResult, JobResult];
    const fairness = round3(smallR.acceptedLatency.p99Ms / alone.acceptedLatency.p99Ms);
    const share = round3(smallR.acceptedInWindow / Math.max(1, smallR.sent));
    fairRounds.push({ ratio: fairness, share, aloneP99Ms: alone.acceptedLatency.p99Ms, besideP99Ms: smallR.acceptedLatency.p99Ms });
    emit({
      bench: "overload-fairness",
      ...setting,
      round,
      admission: "on",
      ratio: fairness,
      ratioOf: `the small key's p99 of accepted writes beside the big key ÷ its p99 alone, at ${FAIRNESS.small}× the open loop's capacity`,
      goal: `<= ${FAIRNESS_GOALS.p99}`,
      met: fairness <= FAIRNESS_GOALS.p99,
      smallAcceptedShare: share,
      anchorRatio: anchors?.fairnessRatio,
      anchorRatioOf: "the same figure against bare node:http answering 200 at once (overload-anchor-fairness)",
      small: {
        ratePerSec: smallRate,
        sockets: SMALL_SOCKETS,
        aloneP99Ms: alone.acceptedLatency.p99Ms,
        aloneSchedule: schedule(alone),
        ...openFigures(smallR),
      },
      big: { ratePerSec: bigRate, sockets: SOCKETS, ...openFigures(bigR) },
      gatewayRssStartMb: both.rssStartMb,
      gatewayRssEndMb: both.rssEndMb,
      gatewayCores: both.gatewayCores,
      loadAverage: both.loadAverage,
      machineBusyCores: both.machineBusyCores,
      listenOverflows: both.listenOverflows,
      ...(both.timeline === undefined ? {} : { admissionTimeline: both.timeline }),
    });
  }
  if (fairRounds.length > 0) {
    const ratio = median(fairRounds.map((r) => r.ratio));
    const share = median(fairRounds.map((r) => r.share));
    emit({
      bench: "overload-goal",
      figure: `two keys (${FAIRNESS_LOADS}): the small key's p99 beside ÷ alone (median of rounds)`,
      value: ratio,
      goal: `<= ${FAIRNESS_GOALS.p99}`,
      met: ratio <= FAIRNESS_GOALS.p99,
      rounds: fairRounds,
    });
    emit({
      bench: "overload-goal",
      figure: `two keys (${FAIRNESS_LOADS}): the small key's accepted share (median of rounds)`,
      value: share,
      goal: `>= ${FAIRNESS_GOALS.share}`,
      met: share >= FAIRNESS_GOALS.share,
    });
  }

  // 4. What a refusal costs the gateway, by the residual of the 2× and 4× phases (overload-refusal.ts).
  const refusalContext: RefusalContext | undefined =
    anchors !== undefined && runs !== undefined
      ? {
          on: runs.on as RefusalContext["on"],
          closedWriteUs: cpuPerWriteOf("on"),
          // A write as the open loop sends them, one by one: the admission-off gateway's CPU per answer at 0.5× (all accepted).
          pacedWriteUs: openCapacities.off.pacedUs,
          capacity: openCapacity,
          coresServed: CPU_CORES_SERVED,
        }
      : undefined;
  if (PHASES.has("refusal") && refusalContext !== undefined && anchors !== undefined)
    emit({ bench: "overload-refusal-cost", ...setting, ...refusalCostFigures(refusalContext, anchors.refusalFloorUs) });

  // 5. A refusal's CPU measured directly: every write but one refused, against node:http's own 503.
  if (PHASES.has("isolated")) {
    gateways.oneSlot = await startGateway(postgres.url, "one-slot");
    const refusals = await measureRefusals({
      gateway: gateways.oneSlot,
      postgres: postgres.faults,
      few: closed,
      many: big1024,
      held: {
        path: `/v1/records/${KEYS.big.records}held`,
        headers: {
          authorization: `Bearer ${KEYS.big.key}`,
          "fencing-credential": bigWrites.credentials[0] as string,
          "content-type": "application/json",
        },
      },
      rounds: ROUNDS,
      durationMs: DURATION_MS,
      drainLimitMs: DRAIN_LIMIT_MS,
      cpuQuota: CPU_QUOTA,
    });
    // A round whose slope measured nothing (NaN) is left out; with none left the line says so (null).
    const finite = (xs: readonly number[]): number[] => xs.filter((x) => Number.isFinite(x));
    const perRefusal = median(finite(refusals.gatewayUs));
    const anchorSlope = median(finite(refusals.anchorSlopeUs));
    const floor = median(refusals.anchorUs);
    const measured = perRefusal > 0 && anchorSlope > 0;
    emit({
      bench: "overload-refusal-isolated",
      ...setting,
      cpuUsPerShed: Number.isFinite(perRefusal) ? perRefusal : null,
      anchorCpuUsPerShed: Number.isFinite(anchorSlope) ? anchorSlope : null,
      ratio: measured ? round3(perRefusal / anchorSlope) : null,
      ratioOf: `the gateway's CPU per refusal ÷ node:http's per 503 at the same rates, medians of ${ROUNDS} interleaved rounds of ${DURATION_MS} ms`,
      // The goal of the residual line (overload-refusal-cost): node:http's 503 in the same load, + 10 µs.
      goal: `<= node:http's 503 at the same rates + ${REFUSAL_SLACK_US} µs`,
      met: measured ? perRefusal <= anchorSlope + REFUSAL_SLACK_US : null,
      roundsMeasured: { gateway: finite(refusals.gatewayUs).length, anchor: finite(refusals.anchorSlopeUs).length, of: ROUNDS },
      floorCpuUsPerShed: floor,
      floorOf: `node:http's CPU per 503 answering a closed loop of ${CLIENTS} as fast as it can`,
      ratioToWrite: measured ? round3(perRefusal / cpuPerWriteOf("on")) : null,
      ...(refusalContext === undefined || !measured ? {} : ceilings(refusalContext, perRefusal)),
      ceilingOf: "as overload-refusal-cost's, with this CPU per refusal",
      perAnswerWith: {
        [CLIENTS]: median(refusals.perAnswerFewUs),
        [BIG_CLOSED]: median(refusals.perAnswerManyUs),
      },
      answersPerSecWith: {
        [CLIENTS]: median(refusals.answersPerSecFew),
        [BIG_CLOSED]: median(refusals.answersPerSecMany),
      },
      fixedCores: median(finite(refusals.fixedCores)),
      notRefused: refusals.notRefused,
      how:
        `a gateway with ${ONE_SLOT_FLAGS.join(" ")}, its one records slot held by a write on a stopped PostgreSQL: every other write is refused queue-full by the early handler, and its connection parked for the refusal's Retry-After; ` +
        `closed loops of ${CLIENTS} and ${BIG_CLOSED} keep-alive clients, each connection opened before its phase; /proc/<pid>/stat utime+stime; ` +
        `per refusal: the slope, (CPU/s with ${BIG_CLOSED} − with ${CLIENTS}) ÷ (answers/s with ${BIG_CLOSED} − with ${CLIENTS}); fixedCores: the CPU/s the slope leaves (timers, parking's sweeps); ` +
        `node:http (anchor-answer.js, 503, the same quota): the same slope over open loops at the rates the gateway answered, on at most as many connections (a free one is reused first)`,
      rounds: refusals,
    });
  }
} finally {
  await Promise.allSettled(generators.map((g) => g.stop()));
  await Promise.allSettled(Object.values(gateways).map((g) => g.stop()));
  await postgres.stop();
}
