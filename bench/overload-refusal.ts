// One refusal's CPU, measured directly, for overload.bench.ts: a gateway whose records family admits
// one write and queues none, its one slot held by a write stuck on a stopped PostgreSQL (SIGSTOP), so
// that every other write is refused `queue-full` by the same early handler as under overload — beside
// bare node:http answering 503 at once (anchor-answer.js), in interleaved closed-loop rounds.
// overload-refusal-cost's figure is a residual (an overload phase's CPU less the accepted writes'
// share at their closed-loop cost), which charges the refusals with anything a write costs more under
// overload; this one is the refusals' own.
import { setTimeout as delay } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { request } from "undici";
import type { ServerFaults } from "@fenced/servers";
import type { JobResult } from "./open-loop.js";
import { round3 } from "./measure.js";
import { answers, cpuUsPerAnswer, phase, type Load, type Measured } from "./overload-phase.js";
import { startServer, type ServerProcess } from "./server-process.js";

const ANCHOR = fileURLToPath(new URL("./anchor-answer.js", import.meta.url));
/** The gateway's flags: one write let in at a time, none waiting. */
export const ONE_SLOT_FLAGS = ["--min-concurrency", "1", "--max-concurrency", "1", "--admission-queue", "0"] as const;

export interface RefusalRounds {
  /** Per round, CPU µs per answer: the gateway refusing every write, node:http answering 503. */
  readonly gatewayUs: number[];
  readonly anchorUs: number[];
  /** Answers other than a refusal, over the gateway's rounds (none expected: all but the held write are refused). */
  readonly notRefused: number;
}

/**
 * `gateway`: started with ONE_SLOT_FLAGS on `postgres`; `load`: a closed-loop load of writes it is
 * sent; `held`: the write that takes the one slot. Stops PostgreSQL while it measures, and resumes it.
 */
export async function measureRefusals(options: {
  gateway: ServerProcess;
  postgres: ServerFaults;
  load: Load;
  held: { path: string; headers: Record<string, string> };
  rounds: number;
  durationMs: number;
  drainLimitMs: number;
}): Promise<RefusalRounds> {
  const { gateway, postgres, load, rounds, durationMs, drainLimitMs } = options;
  const anchor = await startServer([ANCHOR], { ANCHOR_STATUS: "503" });
  // Warm: the refusal's path is compiled before it is measured (most of these are refused already).
  await phase(gateway, [load], 2_000, drainLimitMs);
  postgres.pause();
  const held = request(`http://127.0.0.1:${gateway.port}${options.held.path}`, {
    method: "PUT",
    headers: options.held.headers,
    body: JSON.stringify({ value: 1 }),
  }).then(
    (answer) => answer.body.dump(),
    () => undefined,
  );
  try {
    await holding(gateway);
    const result = { gatewayUs: [] as number[], anchorUs: [] as number[], notRefused: 0 };
    for (let round = 0; round < rounds; round++) {
      for (const server of round % 2 === 0 ? [gateway, anchor] : [anchor, gateway]) {
        const m = await phase(server, [load], durationMs, drainLimitMs);
        (server === gateway ? result.gatewayUs : result.anchorUs).push(cpuUsPerAnswer(m));
        const r = m.results[0] as JobResult;
        if (server === gateway) result.notRefused += answers(r) - r.shed;
      }
    }
    return result;
  } finally {
    postgres.resume();
    await held;
    await anchor.stop();
  }
}

/** Waits until the held write has the records family's one slot (its gauge reads 1). */
async function holding(gateway: ServerProcess): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const metrics = await (await request(`http://127.0.0.1:${gateway.port}/metrics`)).body.text();
    if (/^fenced_gateway_admission_inflight\{route="records"\} 1$/m.test(metrics)) return;
    await delay(25);
  }
  throw new Error("the held write never took the gateway's one slot");
}

/** How much more than node:http's own 503 a refusal may cost the gateway, in CPU µs. */
const REFUSAL_SLACK_US = 10;

/** What the refusal lines read: the admission gateway's open-loop phases, its closed-loop cost per write, the CPU it gets. */
export interface RefusalContext {
  /** The admission gateway's phase at 2× and 4× capacity (its first round), and at 0.5×. */
  readonly on: { readonly 0.5: Measured; readonly 2: Measured; readonly 4: Measured };
  /** CPU µs per write in the closed loop of capacity (all accepted), median. */
  readonly closedWriteUs: number;
  /** CPU µs per write as the open loop sends them, one by one: the admission-off gateway's per answer at 0.5×. */
  readonly pacedWriteUs: number | undefined;
  readonly capacity: number;
  /** The cores one event loop gets: its quota, at most one. */
  readonly coresServed: number;
}

/**
 * Accepted/s at 2× capacity such that accepted × CPU per write + the rest × `perRefusal` fits the
 * cores served: the most any admission policy can accept when every write is answered as it arrives,
 * a write at the closed loop's cost and (`Paced`) at the open loop's.
 */
export function ceilings(c: RefusalContext, perRefusal: number): Record<string, number | null> {
  const at = (perWrite: number): number | null =>
    perWrite > perRefusal ? Math.round((c.coresServed * 1e6 - 2 * c.capacity * perRefusal) / (perWrite - perRefusal)) : null;
  return {
    acceptedCeilingAt2x: at(c.closedWriteUs),
    ...(c.pacedWriteUs === undefined ? {} : { acceptedCeilingAt2xPaced: at(c.pacedWriteUs), pacedCpuUsPerWrite: c.pacedWriteUs }),
  };
}

/**
 * The CPU over a phase, less the accepted writes' share, divided among the shed answers. An accepted
 * write of an open loop costs what a paced one does (pacedWriteUs), not the closed loop's.
 */
function residual(c: RefusalContext, m: Measured): Record<string, unknown> {
  const r = m.results[0] as JobResult;
  const shedShare = m.cpuSeconds * 1e6 - (c.pacedWriteUs ?? c.closedWriteUs) * r.accepted;
  return {
    cpuUsPerShed: r.shed > 0 ? Math.round(shedShare / r.shed) : null,
    shed: r.shed,
    accepted: r.accepted,
    otherAnswers: answers(r) - r.accepted - r.shed,
    // Writes cut at the drain limit: the gateway's work on them after the cut is not in the phase's CPU.
    unanswered: r.unanswered,
    cpuUsPerAnswer: cpuUsPerAnswer(m),
  };
}

/** The overload-refusal-cost line's figures: a refusal's CPU by the residual at 4× (and 2×), against a write's and node:http's (`floorUs`). */
export function refusalCostFigures(c: RefusalContext, floorUs: { readonly at2: number; readonly at4: number }): Record<string, unknown> {
  const at4 = residual(c, c.on[4]);
  const perShed = typeof at4.cpuUsPerShed === "number" ? at4.cpuUsPerShed : undefined;
  const perAnswerAtHalf = cpuUsPerAnswer(c.on[0.5]);
  const atFloor = ceilings(c, floorUs.at2);
  return {
    admission: "on",
    cpuUsPerAccepted: c.closedWriteUs,
    cpuUsPerShed: perShed ?? null,
    ratio: perShed === undefined ? null : round3(perShed / c.closedWriteUs),
    ratioOf: "gateway CPU per shed answer ÷ per accepted write",
    // A refusal is to cost what node:http's own 503 costs in the same load, give or take REFUSAL_SLACK_US.
    goal: `<= node:http's 503 at 4× (${floorUs.at4} µs) + ${REFUSAL_SLACK_US} µs`,
    met: perShed !== undefined && perShed <= floorUs.at4 + REFUSAL_SLACK_US,
    ...(perShed === undefined ? {} : ceilings(c, perShed)),
    ceilingOf: `accepted/s at 2× such that accepted × CPU per write + shed × CPU per shed answer fits the CPU one event loop gets (${c.coresServed} of a core): what any admission policy in the gateway can reach when it answers every write as it arrives; a write at the closed loop's cost, and (Paced) at the open loop's, the admission-off gateway's CPU per answer at 0.5×`,
    // node:http's own refusal (anchor-answer.js): the least a refusal can cost a Node HTTP server here.
    floorCpuUsPerShed: floorUs.at4,
    ratioToFloor: perShed === undefined ? null : round3(perShed / floorUs.at4),
    acceptedCeilingAt2xAtFloor: atFloor.acceptedCeilingAt2x,
    acceptedCeilingAt2xAtFloorPaced: atFloor.acceptedCeilingAt2xPaced ?? null,
    floorOf: "the same ceiling with each shed answer at node:http's own cost at 2× (overload-anchor, 503)",
    how:
      "/proc/<pid>/stat utime+stime of the admission gateway; per accepted write: the paced rounds that measured the open loop's capacity (all accepted), median; " +
      "per shed answer: the 4× phase's CPU (start to last answer) less accepted × that, ÷ shed answers (other answers, if any, are charged to the shed)",
    at4: {
      ...at4,
      cpuUsPerAnswerAtHalf: perAnswerAtHalf,
      ratioPerAnswer4xToHalf: round3((at4.cpuUsPerAnswer as number) / perAnswerAtHalf),
    },
    at2: residual(c, c.on[2]),
  };
}
