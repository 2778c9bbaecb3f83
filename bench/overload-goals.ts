// The open-loop goal lines of overload.bench.ts: each multiple of capacity, each gateway, every
// figure with its goal and whether it was met (the "off" gateway's for comparison, not judged).
import { emit, median, round3 } from "./measure.js";
import type { JobResult } from "./open-loop.js";
import { perSec, schedule, type Measured } from "./overload-phase.js";

export const FRACTIONS = [0.5, 1, 2, 4, 10] as const;
/**
 * Goodput (accepted ÷ the open loop's capacity) each multiple of that capacity is to keep, and the
 * most its accepted p99 may be, as a multiple of its p99 at 0.5×. Against the open loop's own
 * capacity (what a quota carries of writes sent one by one): no server that answers every request
 * keeps the closed loop's capacity in an open loop, express and node:http included.
 *
 * The latency lines are judged as the gateway times a write, from its arrival (gateway-served.ts):
 * past its capacity the gateway parks a connection rather than read and refuse it
 * (admission/parking.ts), and a flood's own wait unread is reported — from each write's scheduled
 * send, the generator's figure — not bounded.
 */
const GOALS: Record<(typeof FRACTIONS)[number], { goodput?: number; p99?: number }> = {
  0.5: {},
  1: {},
  2: { goodput: 0.85, p99: 5 },
  4: { goodput: 0.6, p99: 5 },
  10: {},
};
type Side = "off" | "on";

/** The two keys of the fairness phase, each a multiple of the open loop's capacity: a flood, and a small key that must keep its share. */
export const FAIRNESS = { big: 4, small: 0.25 } as const;
/** How the fairness lines name the two keys' loads. */
export const FAIRNESS_LOADS = `${FAIRNESS.big}× and ${FAIRNESS.small}×`;

/** Emits the goal lines of the open-loop phases (`runs`: each gateway's phase at each multiple of `capacity`). */
export function emitOpenGoals(
  runs: Record<Side, Partial<Record<(typeof FRACTIONS)[number], Measured>>>,
  capacity: number,
  storeDeadlineMs: number,
  round = 0,
): void {
  for (const fraction of FRACTIONS) {
    for (const side of ["on", "off"] as const) {
      const m = runs[side][fraction] as Measured;
      const r = m.results[0] as JobResult;
      const base = (runs[side][0.5] as Measured).results[0] as JobResult;
      const goal = GOALS[fraction];
      const line = (figure: string, value: number, goalText: string, met: boolean, extra: Record<string, unknown> = {}): void =>
        emit({
          bench: "overload-goal",
          figure,
          admission: side,
          fraction,
          round,
          value,
          goal: goalText,
          met,
          ...(side === "off" ? { judged: "no: the same build without admission control, for comparison" } : {}),
          ...extra,
          schedule: schedule(r),
        });
      if (fraction === 0.5) {
        const shed = perSec(r.shed, r);
        line("refused/s at 0.5×", shed, "0: nothing refused", r.shed === 0);
        continue;
      }
      const accepted = round3(perSec(r.acceptedInWindow, r) / capacity);
      line(
        "goodput: accepted ÷ capacity",
        accepted,
        goal.goodput === undefined ? "(reported)" : `>= ${goal.goodput}`,
        accepted >= (goal.goodput ?? 0),
        {
          acceptedPerSec: perSec(r.acceptedInWindow, r),
          refusedPerSec: perSec(r.shed, r),
          capacity,
        },
      );
      const served = m.served;
      const servedBase = (runs[side][0.5] as Measured).served;
      if (goal.p99 !== undefined) {
        const p99 = round3((served?.acceptedP99Ms ?? Number.NaN) / (servedBase?.acceptedP99Ms ?? Number.NaN));
        line("p99 of accepted from arrival ÷ its p99 at 0.5×", p99, `<= ${goal.p99}`, p99 <= goal.p99, {
          acceptedP99Ms: served?.acceptedP99Ms,
          atHalfP99Ms: servedBase?.acceptedP99Ms,
          fromSend: {
            ratio: round3(r.acceptedLatency.p99Ms / base.acceptedLatency.p99Ms),
            acceptedP99Ms: r.acceptedLatency.p99Ms,
            atHalfP99Ms: base.acceptedLatency.p99Ms,
            judged: "no: from each write's scheduled send, its wait on a parked connection included (reported)",
          },
        });
      }
      const slowest = served?.slowestAtMostMs ?? Number.NaN;
      line(
        "slowest answer from arrival, accepted or shed (ms, at most)",
        slowest,
        `<= ${storeDeadlineMs} (the store deadline), none unanswered`,
        slowest <= storeDeadlineMs && r.unanswered === 0,
        { unanswered: r.unanswered, fromSendMs: r.anyMaxMs },
      );
      const rss = round3(m.rssEndMb / m.rssStartMb);
      line("gateway RSS as the sends end ÷ at the start", rss, "<= 1.5", rss <= 1.5, {
        rssStartMb: m.rssStartMb,
        rssEndMb: m.rssEndMb,
        rssPeakMb: m.rssPeakMb,
      });
    }
  }
}

/** The open-loop goal lines again, as medians over the interleaved rounds: the figures each goal is judged on. */
export function emitOpenMedians(
  rounds: readonly Record<Side, Partial<Record<(typeof FRACTIONS)[number], Measured>>>[],
  capacity: number,
): void {
  for (const side of ["on", "off"] as const) {
    const at = (fraction: (typeof FRACTIONS)[number]): JobResult[] =>
      rounds.map((r) => (r[side][fraction] as Measured).results[0] as JobResult);
    const half = at(0.5);
    const servedAt = (fraction: (typeof FRACTIONS)[number]): (Measured["served"] | undefined)[] =>
      rounds.map((r) => (r[side][fraction] as Measured).served);
    const servedHalf = servedAt(0.5);
    for (const fraction of FRACTIONS) {
      const rs = at(fraction);
      const goal = GOALS[fraction];
      const goodput = round3(median(rs.map((r) => perSec(r.acceptedInWindow, r) / capacity)));
      const served = servedAt(fraction);
      const p99Ratio = round3(
        median(served.map((s, i) => (s?.acceptedP99Ms ?? Number.NaN) / (servedHalf[i]?.acceptedP99Ms ?? Number.NaN))),
      );
      const fromSendP99Ratio = round3(median(rs.map((r, i) => r.acceptedLatency.p99Ms / (half[i] as JobResult).acceptedLatency.p99Ms)));
      const refusedPerSec = median(rs.map((r) => perSec(r.shed, r)));
      emit({
        bench: "overload-goal-median",
        admission: side,
        fraction,
        rounds: rounds.length,
        goodput,
        goodputGoal: goal.goodput === undefined ? "(reported)" : `>= ${goal.goodput}`,
        goodputMet: goodput >= (goal.goodput ?? 0),
        p99Ratio,
        p99Of: "the p99 of accepted writes from their arrival (the gateway's request histogram) ÷ the same at 0.5×",
        p99Goal: goal.p99 === undefined ? "(reported)" : `<= ${goal.p99}`,
        p99Met: goal.p99 === undefined || p99Ratio <= goal.p99,
        acceptedP99Ms: median(served.map((s) => s?.acceptedP99Ms ?? Number.NaN)),
        fromSend: {
          p99Ratio: fromSendP99Ratio,
          acceptedP99Ms: median(rs.map((r) => r.acceptedLatency.p99Ms)),
          slowestMs: Math.max(...rs.map((r) => r.anyMaxMs)),
          judged: "no: from each write's scheduled send, its wait on a parked connection included (reported)",
        },
        refusedPerSec,
        ...(fraction === 0.5 ? { refusedGoal: "0", refusedMet: rs.every((r) => r.shed === 0) } : {}),
        slowestAtMostMs: Math.max(...served.map((s) => s?.slowestAtMostMs ?? Number.NaN)),
        goodputRounds: rs.map((r) => round3(perSec(r.acceptedInWindow, r) / capacity)),
      });
    }
  }
}

/**
 * The open loop's capacity, measured before any open-loop phase: what a write costs the gateway when
 * writes arrive one by one on a schedule (`paced`: CPU per answer in paced phases below saturation),
 * beside what it costs in the closed loop that measured `closedCapacity` (64 clients, the loop never
 * idle). Paced arrivals share no event-loop turn, read or write, so each pays them all: the writes/s
 * `coresServed` carries at the paced cost is the capacity every open-loop rate is a multiple of.
 * Returns each side's capacity and CPU per paced write.
 */
export function openLoopCapacity(
  paced: Record<Side, readonly number[]>,
  closedCpuUsPerWrite: Record<Side, number>,
  closedCapacity: number,
  coresServed: number,
  pacedRate: number,
): Record<Side, { capacity: number; pacedUs: number }> {
  const out = { on: { capacity: 0, pacedUs: 0 }, off: { capacity: 0, pacedUs: 0 } };
  for (const side of ["on", "off"] as const) {
    const perAnswer = median([...paced[side]]);
    const capacity = Math.round((coresServed * 1e6) / perAnswer);
    out[side] = { capacity, pacedUs: perAnswer };
    emit({
      bench: "overload-open-loop-capacity",
      admission: side,
      writesPerSec: capacity,
      of: `the writes/s ${coresServed} of a core carries at the CPU per answer of paced writes (${pacedRate}/s, median of ${paced[side].length} interleaved rounds): every open-loop rate is a multiple of the admission-off gateway's`,
      cpuUsPerPacedWrite: perAnswer,
      closedLoopCpuUsPerWrite: closedCpuUsPerWrite[side],
      ratio: round3(perAnswer / closedCpuUsPerWrite[side]),
      ratioOf: "CPU per paced write ÷ CPU per write in the closed loop",
      ofClosedCapacity: round3(capacity / closedCapacity),
      goal: "(reported)",
      rounds: paced[side],
    });
  }
  return out;
}
