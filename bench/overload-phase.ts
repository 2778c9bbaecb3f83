// One phase of overload.bench.ts against one gateway process, and the figures of its lines: the
// loads start together on the generators, the gateway's RSS and CPU are read from /proc around them.
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { setTimeout as delay } from "node:timers/promises";
import { readServed, servedBetween, type Served } from "./gateway-served.js";
import { watchGateway, type Sample } from "./gateway-watch.js";
import { round3 } from "./measure.js";
import type { Generator, Job, JobResult } from "./open-loop.js";
import { CLK_TCK, type ServerProcess } from "./server-process.js";

/** The generator kept its schedule when its sends left at most this late at p99. */
const LAG_LIMIT_MS = 10;
/** The longest wait for a gateway to go idle between phases. */
const SETTLE_LIMIT_MS = 30_000;
/**
 * The window a gateway must stay idle in before a phase. A parked connection is not read, so its
 * close is seen only when the gateway reads it again: at most the refusal's Retry-After (1 s) and a
 * sweep (10 ms) after it was parked. A window longer than that sees the last phase's closes through.
 */
const QUIET_MS = 1_050;
/** Idle: under 2 % of a core over the window. */
const QUIET_CPU_SECONDS = (0.02 * QUIET_MS) / 1000;

export interface Load {
  readonly generator: Generator;
  readonly job: Pick<Job, "mode" | "ratePerSec" | "connections" | "apiKey" | "keyPrefix" | "credentials">;
}

export interface Measured {
  readonly results: JobResult[];
  /** The gateway's RSS (MiB) as the phase starts, as its sends end, its peak, and once every answer is in. */
  readonly rssStartMb: number;
  readonly rssEndMb: number;
  readonly rssPeakMb: number;
  readonly rssAfterMb: number;
  /** The gateway's CPU time (user + system) from the start to the last answer, seconds, and as a share of a core. */
  readonly cpuSeconds: number;
  /** The wall-clock time cpuSeconds was read over, seconds. */
  readonly cpuWindowSeconds: number;
  readonly gatewayCores: number;
  /** The machine's 1-minute load average as the phase ends: how many processes wanted its cores. */
  readonly loadAverage: number;
  /** The machine's busy cores over the phase (/proc/stat): gateway, generator, database and the rest together. */
  readonly machineBusyCores: number;
  /**
   * Connections the kernel dropped over the phase because a listener's accept queue was full
   * (/proc/net/netstat TcpExt ListenOverflows, machine-wide): each costs its client a SYN
   * retransmission, one second and then more, in which nobody is busy.
   */
  readonly listenOverflows: number;
  /** How long the gateway took to go idle before the phase (ms). */
  readonly settledMs: number;
  /** What admission control did, sampled from /metrics (a gateway with admission control only). */
  readonly timeline?: Sample[];
  /** The records writes as the gateway timed them, from each one's arrival (gateway-served.ts; a gateway's phase asked for it): a parked connection's wait is not in it. */
  readonly served?: Served;
}

/**
 * Waits until `gw` is idle over QUIET_MS (SETTLE_LIMIT_MS at most). A phase whose writes were cut at
 * the drain limit leaves the gateway working through them, and one that parked connections leaves
 * their closes to come; the next phase must not pay for that work in its latency or its CPU.
 */
async function settle(gw: ServerProcess): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    const cpu0 = gw.cpuSeconds();
    await delay(QUIET_MS);
    if (gw.cpuSeconds() - cpu0 <= QUIET_CPU_SECONDS || performance.now() - t0 > SETTLE_LIMIT_MS) return Math.round(performance.now() - t0);
  }
}

/**
 * One phase against `gw`, once it is idle: every load starts at once, for `durationMs`, and its answers
 * are waited for up to `drainLimitMs` after its last send; the gateway is read around it (`watch`:
 * admission control's state sampled through it; `served`: its request histogram read before and after).
 */
export async function phase(
  gw: ServerProcess,
  loads: readonly Load[],
  durationMs: number,
  drainLimitMs: number,
  {
    watch = false,
    served: timed = false,
    preopen = false,
  }: { readonly watch?: boolean; readonly served?: boolean; readonly preopen?: boolean } = {},
): Promise<Measured> {
  // Each open load's connections are made first (Connections.open), and the gateway let settle after
  // them; a closed load's too with `preopen`, so that its figures hold no connection's opening.
  const origin = `http://127.0.0.1:${gw.port}`;
  for (const l of loads.filter((load) => load.job.mode === "open" || preopen)) {
    const opened = await l.generator.open(origin, l.job.connections);
    if (opened < l.job.connections) process.stderr.write(`${opened} of ${l.job.connections} connections opened before the phase\n`);
  }
  const settledMs = await settle(gw);
  const servedBefore = timed ? await readServed(origin) : undefined;
  gw.resetPeak();
  const rssStartMb = gw.rssMb().now;
  const cpu0 = gw.cpuSeconds();
  const t0 = performance.now();
  const busy0 = machineBusySeconds();
  const overflows0 = listenOverflows();
  const startAtMs = Date.now() + 200;
  let rssEndMb = Number.NaN;
  const atEnd = setTimeout(() => (rssEndMb = gw.rssMb().now), startAtMs + durationMs - Date.now());
  const watching = watch ? watchGateway(`http://127.0.0.1:${gw.port}`) : undefined;
  const results = await Promise.all(loads.map((l) => l.generator.run({ ...l.job, origin, startAtMs, durationMs, drainLimitMs })));
  clearTimeout(atEnd);
  const timeline = await watching?.stop();
  const cpuSeconds = gw.cpuSeconds() - cpu0;
  const cpuWindowSeconds = (performance.now() - t0) / 1000;
  const sinceStart = (Date.now() - startAtMs) / 1000;
  const machineBusyCores = round3((machineBusySeconds() - busy0) / sinceStart);
  const rss = gw.rssMb();
  const overflows = listenOverflows() - overflows0;
  // The connections opened before the phase close now, once the gateway and the machine are read.
  await Promise.all(loads.map((l) => l.generator.close()));
  const served = servedBefore === undefined ? undefined : servedBetween(servedBefore, await readServed(origin));
  return {
    results,
    rssStartMb,
    rssEndMb,
    rssPeakMb: rss.peak,
    rssAfterMb: rss.now,
    cpuSeconds,
    cpuWindowSeconds,
    gatewayCores: round3(cpuSeconds / sinceStart),
    loadAverage: round3(loadavg()[0] ?? Number.NaN),
    machineBusyCores,
    listenOverflows: overflows,
    settledMs,
    ...(timeline === undefined ? {} : { timeline }),
    ...(served === undefined ? {} : { served }),
  };
}

/** CPU seconds every core of the machine has spent busy since boot: /proc/stat's first line less idle and iowait (USER_HZ ticks). */
function machineBusySeconds(): number {
  const fields = (readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "").trim().split(/\s+/).slice(1, 9).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = fields;
  return (user + nice + system + irq + softirq + steal) / CLK_TCK;
}

/** TcpExt ListenOverflows since boot: /proc/net/netstat holds a line of names and a line of values. */
function listenOverflows(): number {
  const lines = readFileSync("/proc/net/netstat", "utf8").split("\n");
  const names = lines.findIndex((l) => l.startsWith("TcpExt:"));
  const at = (lines[names] ?? "").split(" ").indexOf("ListenOverflows");
  return Number((lines[names + 1] ?? "").split(" ")[at] ?? Number.NaN);
}

export const perSec = (n: number, r: JobResult): number => Math.round((n * 1000) / r.windowMs);
export const answers = (r: JobResult): number => r.accepted + r.shed + Object.values(r.other).reduce((a, b) => a + b, 0);
/** The server's CPU (µs) per answer of a phase, every load's answers counted. */
export const cpuUsPerAnswer = (m: Pick<Measured, "cpuSeconds" | "results">): number =>
  Math.round(
    (m.cpuSeconds * 1e6) /
      Math.max(
        1,
        m.results.reduce((n, r) => n + answers(r), 0),
      ),
  );
export const schedule = (r: JobResult): string =>
  r.sendLag.p99Ms <= LAG_LIMIT_MS
    ? `kept (sends left ${r.sendLag.p99Ms} ms late at p99)`
    : `NOT kept: sends left ${r.sendLag.p99Ms} ms late at p99 (max ${r.sendLag.maxMs} ms); the offered rate arrived in bursts`;

/** The figures of one open-loop load. */
export function openFigures(r: JobResult): Record<string, unknown> {
  return {
    offeredPerSec: perSec(r.sent, r),
    // Answers that arrived while the load lasted, ÷ its length: the throughput under that load.
    acceptedPerSec: perSec(r.acceptedInWindow, r),
    shedPerSec: perSec(r.shedInWindow, r),
    // Every answer of the phase, those after the last send too, ÷ the same length.
    allAnswersPerSec: { accepted: perSec(r.accepted, r), shed: perSec(r.shed, r) },
    otherByStatus: r.other,
    unanswered: r.unanswered,
    acceptedP50Ms: r.acceptedLatency.p50Ms,
    acceptedP99Ms: r.acceptedLatency.p99Ms,
    acceptedMaxMs: r.acceptedLatency.maxMs,
    anyAnswerMaxMs: r.anyMaxMs,
    totals: { sent: r.sent, accepted: r.accepted, shed: r.shed },
    drainMs: r.drainMs,
    preopened: r.preopened,
    socketWaits: r.socketWaits,
    socketWaitMaxMs: r.socketWaitMaxMs,
    sendLagP99Ms: r.sendLag.p99Ms,
    generatorUse: { cores: r.generatorCores, gcMaxMs: r.generatorGcMaxMs, gcTotalMs: r.generatorGcTotalMs },
    schedule: schedule(r),
  };
}
