// One refusal's CPU, measured directly, for overload.bench.ts: a gateway whose records family admits
// one write and queues none, its one slot held by a write stuck on a stopped PostgreSQL (SIGSTOP), so
// that every other write is refused `queue-full` by the same early handler as under overload — beside
// bare node:http answering 503 at once (anchor-answer.js), in interleaved closed-loop rounds.
// overload-refusal-cost's figure is a residual (an overload phase's CPU less the accepted writes'
// share at their closed-loop cost), which charges the refusals with anything a write costs more under
// overload; this one is the refusals' own.
// A refused connection is parked (admission/parking.ts): with the one slot held there is never room,
// so it is read again only after the refusal's Retry-After, a closed loop of n connections is
// answered about n times a second, and its CPU per answer holds whatever the gateway spends by the
// second (its timers, parking's sweeps) divided among few answers. A refusal's own CPU is the slope
// between two loops: the extra CPU a second of 1,024 connections over 64, per extra answer a second.
// node:http's 503 is measured the same way, sent by an open loop at the rates the gateway answered
// (on at most as many connections: a free one is reused first), and once more in a closed loop of
// 64, where it answers as fast as it can (its floor: one wake-up reads many requests). Every
// connection is opened before its phase and closed after it, outside the figures.
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
  /** Per round, the gateway's CPU µs per refusal: the slope from `few`'s connections to `many`'s. */
  readonly gatewayUs: number[];
  /** Per round, node:http's CPU µs per 503 by the same slope, sent at the gateway's rates. */
  readonly anchorSlopeUs: number[];
  /** Per round, node:http's CPU µs per 503 answering `few` as fast as it can. */
  readonly anchorUs: number[];
  /** Per round, the gateway's CPU µs per answer to `few` and to `many`. */
  readonly perAnswerFewUs: number[];
  readonly perAnswerManyUs: number[];
  /** Per round, answers a second: the gateway's to `few` and to `many`. */
  readonly answersPerSecFew: number[];
  readonly answersPerSecMany: number[];
  /** Per round, the gateway's CPU a second that the slope leaves unexplained (cores): what it spends by the second. */
  readonly fixedCores: number[];
  /** Answers other than a refusal, over the gateway's rounds (none expected: all but the held write are refused). */
  readonly notRefused: number;
}

/** Answers a second, and CPU seconds a second, of a phase. */
function rates(m: Measured): { answers: number; cores: number } {
  const n = m.results.reduce((sum, r) => sum + answers(r), 0);
  return { answers: n / m.cpuWindowSeconds, cores: m.cpuSeconds / m.cpuWindowSeconds };
}

/**
 * The extra CPU a second per extra answer a second, from phase `f` to phase `m` (cores per answer/s:
 * seconds); NaN unless `m` was answered at least twice as often as `f` and cost more: too close, the
 * two phases' noise is the figure.
 */
function slope(f: Measured, m: Measured): { perAnswer: number; fixedCores: number } {
  const a = rates(f);
  const b = rates(m);
  const perAnswer = b.answers >= 2 * a.answers && b.cores > a.cores ? (b.cores - a.cores) / (b.answers - a.answers) : Number.NaN;
  return { perAnswer, fixedCores: a.cores - perAnswer * a.answers };
}

/**
 * `gateway`: started with ONE_SLOT_FLAGS on `postgres`; `few`, `many`: closed-loop loads of writes
 * over two numbers of connections; `held`: the write that takes the one slot; node:http runs under
 * `cpuQuota` as the gateway does. Stops PostgreSQL while it measures, and resumes it.
 */
export async function measureRefusals(options: {
  gateway: ServerProcess;
  postgres: ServerFaults;
  few: Load;
  many: Load;
  held: { path: string; headers: Record<string, string> };
  rounds: number;
  durationMs: number;
  drainLimitMs: number;
  cpuQuota: number;
}): Promise<RefusalRounds> {
  const { gateway, postgres, few, many, rounds, durationMs, drainLimitMs } = options;
  const anchor = await startServer([ANCHOR], { ANCHOR_STATUS: "503" }, options.cpuQuota);
  // Warm: each path is compiled before it is measured (most of the gateway's are refused already).
  await phase(gateway, [few], 2_000, drainLimitMs);
  await phase(anchor, [few], 2_000, drainLimitMs);
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
    const result: { -readonly [K in keyof RefusalRounds]: RefusalRounds[K] } = {
      gatewayUs: [],
      anchorSlopeUs: [],
      anchorUs: [],
      perAnswerFewUs: [],
      perAnswerManyUs: [],
      answersPerSecFew: [],
      answersPerSecMany: [],
      fixedCores: [],
      notRefused: 0,
    };
    const measure = (server: ServerProcess, load: Load): Promise<Measured> =>
      phase(server, [load], durationMs, drainLimitMs, { preopen: true });
    /** node:http sent `load`'s writes at the rate `at` was answered, on at most as many connections. */
    const pacedAs = (load: Load, at: Measured): Load => ({
      generator: load.generator,
      job: { ...load.job, mode: "open", ratePerSec: Math.max(1, Math.round(rates(at).answers)) },
    });
    for (let round = 0; round < rounds; round++) {
      // The gateway's two loops, then node:http's at their rates, each pair in turn first; then the floor.
      const [atFew, atMany] = await inTurn(
        round,
        () => measure(gateway, few),
        () => measure(gateway, many),
      );
      const [pacedFew, pacedMany] = await inTurn(
        round,
        () => measure(anchor, pacedAs(few, atFew)),
        () => measure(anchor, pacedAs(many, atMany)),
      );
      const atFloor = await measure(anchor, few);
      for (const m of [atFew, atMany]) result.notRefused += answers(m.results[0] as JobResult) - (m.results[0] as JobResult).shed;
      const gatewaySlope = slope(atFew, atMany);
      result.gatewayUs.push(Math.round(gatewaySlope.perAnswer * 1e6)); // NaN: a round that measured nothing
      result.fixedCores.push(round3(gatewaySlope.fixedCores));
      result.anchorSlopeUs.push(Math.round(slope(pacedFew, pacedMany).perAnswer * 1e6));
      result.anchorUs.push(cpuUsPerAnswer(atFloor));
      result.perAnswerFewUs.push(cpuUsPerAnswer(atFew));
      result.perAnswerManyUs.push(cpuUsPerAnswer(atMany));
      result.answersPerSecFew.push(Math.round(rates(atFew).answers));
      result.answersPerSecMany.push(Math.round(rates(atMany).answers));
    }
    return result;
  } finally {
    postgres.resume();
    await held;
    await anchor.stop();
  }
}

/** Runs `a` and `b` one after the other, `b` first in odd rounds; their results in the order a, b. */
async function inTurn<T>(round: number, a: () => Promise<T>, b: () => Promise<T>): Promise<[T, T]> {
  if (round % 2 === 0) {
    const first = await a();
    return [first, await b()];
  }
  const second = await b();
  return [await a(), second];
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
export const REFUSAL_SLACK_US = 10;

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
    ratio: perShed === undefined || perShed <= 0 ? null : round3(perShed / c.closedWriteUs),
    ratioOf: "gateway CPU per shed answer ÷ per accepted write",
    // A refusal is to cost what node:http's own 503 costs in the same load, give or take REFUSAL_SLACK_US.
    goal: `<= node:http's 503 at 4× (${floorUs.at4} µs) + ${REFUSAL_SLACK_US} µs`,
    // No residual left (the accepted writes cost less at 4× than paced ones, or few were refused):
    // it says nothing of a refusal, and overload-refusal-isolated's figure is the one to read.
    met: perShed !== undefined && perShed > 0 ? perShed <= floorUs.at4 + REFUSAL_SLACK_US : null,
    ...(perShed === undefined || perShed <= 0 ? {} : ceilings(c, perShed)),
    ceilingOf: `accepted/s at 2× such that accepted × CPU per write + shed × CPU per shed answer fits the CPU one event loop gets (${c.coresServed} of a core): what any admission policy in the gateway can reach when it answers every write as it arrives; a write at the closed loop's cost, and (Paced) at the open loop's, the admission-off gateway's CPU per answer at 0.5×`,
    // node:http's own refusal (anchor-answer.js): the least a refusal can cost a Node HTTP server here.
    floorCpuUsPerShed: floorUs.at4,
    ratioToFloor: perShed === undefined || perShed <= 0 ? null : round3(perShed / floorUs.at4),
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
