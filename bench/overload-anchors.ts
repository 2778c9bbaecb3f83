// The anchors of overload.bench.ts: the same generators, writes and rates against bare node:http
// (anchor-answer.js) answering every write at once — 200, a server with nothing to do, and 503, the
// cheapest refusal a Node HTTP server can give. On one machine shared by the generators, the servers
// and PostgreSQL, what these measure is the setup's own: the latency and fairness a server with no
// work gets, and the CPU a refusal costs node:http alone. The gateway's lines are read against them.
import { fileURLToPath } from "node:url";
import { emit, round3 } from "./measure.js";
import type { JobResult } from "./open-loop.js";
import { FAIRNESS } from "./overload-goals.js";
import { cpuUsPerAnswer, openFigures, phase, type Load } from "./overload-phase.js";
import { withServer, type ServerProcess } from "./server-process.js";

const ANCHOR = fileURLToPath(new URL("./anchor-answer.js", import.meta.url));
const FRACTIONS = [0.5, 2, 4] as const;

export interface Anchors {
  /** node:http's CPU per 503 answer (µs) at 2× and 4×: the floor of a refusal's cost here. */
  readonly refusalFloorUs: { readonly at2: number; readonly at4: number };
  /** The fairness figure against the 200 anchor: the small key's p99 beside the big one ÷ alone. */
  readonly fairnessRatio: number;
}

/**
 * Runs the anchors: `load(key, rate)` is the open-loop load of that key at that rate, as the gateway
 * gets it; `durationMs` and `drainLimitMs` as the gateway's phases. Emits a line per phase.
 */
export async function runAnchors(
  load: (key: "big" | "small", ratePerSec: number) => Load,
  capacity: number,
  durationMs: number,
  drainLimitMs: number,
): Promise<Anchors> {
  const line = (anchor: string, fraction: number, r: JobResult, m: Awaited<ReturnType<typeof phase>>): void =>
    emit({
      bench: "overload-anchor",
      anchor,
      fraction,
      ratePerSec: Math.round(capacity * fraction),
      durationMs,
      ...openFigures(r),
      serverCpuUsPerAnswer: cpuUsPerAnswer(m),
      serverCores: m.gatewayCores,
      machineBusyCores: m.machineBusyCores,
      listenOverflows: m.listenOverflows,
    });
  const rate = (fraction: number): number => Math.max(50, Math.round(capacity * fraction));

  let fairnessRatio = Number.NaN;
  await withAnchor("200", async (server) => {
    for (const fraction of FRACTIONS) {
      const m = await phase(server, [load("big", rate(fraction))], durationMs, drainLimitMs);
      line("node:http answering 200 at once", fraction, m.results[0] as JobResult, m);
    }
    const alone = (await phase(server, [load("small", rate(FAIRNESS.small))], durationMs, drainLimitMs)).results[0] as JobResult;
    const both = await phase(server, [load("big", rate(FAIRNESS.big)), load("small", rate(FAIRNESS.small))], durationMs, drainLimitMs);
    const small = both.results[1] as JobResult;
    fairnessRatio = round3(small.acceptedLatency.p99Ms / alone.acceptedLatency.p99Ms);
    emit({
      bench: "overload-anchor-fairness",
      anchor: "node:http answering 200 at once",
      ratio: fairnessRatio,
      ratioOf: `the small key's p99 beside the big key at ${FAIRNESS.big}× ÷ its p99 alone, at ${FAIRNESS.small}× capacity: what this setup gives a server with no work`,
      aloneP99Ms: alone.acceptedLatency.p99Ms,
      besideP99Ms: small.acceptedLatency.p99Ms,
      machineBusyCores: both.machineBusyCores,
    });
  });
  const refusalFloorUs = { at2: Number.NaN, at4: Number.NaN };
  await withAnchor("503", async (server) => {
    for (const fraction of [2, 4] as const) {
      const m = await phase(server, [load("big", rate(fraction))], durationMs, drainLimitMs);
      line("node:http answering 503 overloaded at once", fraction, m.results[0] as JobResult, m);
      refusalFloorUs[`at${fraction}`] = cpuUsPerAnswer(m);
    }
  });
  return { refusalFloorUs, fairnessRatio };
}

const withAnchor = (status: string, run: (server: ServerProcess) => Promise<void>): Promise<void> =>
  withServer([ANCHOR], { ANCHOR_STATUS: status }, run);
