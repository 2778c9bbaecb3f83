import type { Call, CallStep, HistoryEvent, NemesisEvent } from "./history.js";
import type { Op } from "./history-ops.js";

/**
 * Liveness: every call an operation makes (acquire, register, read, write, release) is answered — ok,
 * refused, unavailable or outcome unknown — within the deadline plus a margin, and every operation
 * invoked is answered at all.
 *
 * The deadline is what the store promises (its `timeoutMs`); the workers give up acquiring a lease
 * after the same time. The margin covers what a loaded machine adds (scheduling, a garbage collection,
 * the report over IPC). What the nemesis does to a call outside every deadline is not held against
 * it: the time its worker was stopped, the time the gateway was stopped, and the delays held on the
 * worker's link to the gateway (a delay on a link to the store or to a lock node is inside the
 * deadline, and is not allowed for).
 */

export interface LivenessOptions {
  /** The store's deadline (timeoutMs) and the workers' for acquiring a lease. */
  readonly deadlineMs: number;
  /** What an answer may take beyond the deadline. */
  readonly marginMs: number;
}

export interface SlowCall {
  readonly op: string;
  readonly worker: number;
  readonly step: CallStep;
  /** When the call started, run ms. */
  readonly start: number;
  /** How long it took, and how much of it the nemesis stalled it outside the deadline. */
  readonly ms: number;
  readonly stalledMs: number;
}

export interface LivenessResult {
  readonly deadlineMs: number;
  readonly marginMs: number;
  readonly calls: number;
  /** Calls answered later than deadline + margin once their stalls are taken off. */
  readonly late: number;
  /** Operations invoked and never answered. */
  readonly unanswered: number;
  /** The call with the longest answer, stalls taken off. */
  readonly slowest: SlowCall | undefined;
  /** The same for each kind of call: the lock's (acquire, release) and the store's (register, read, write). */
  readonly slowestByStep: Partial<Readonly<Record<CallStep, SlowCall>>>;
  readonly firstLate: SlowCall | undefined;
}

interface Stall {
  readonly from: number;
  readonly to: number;
  /** undefined: every worker (the gateway paused). */
  readonly worker: number | undefined;
  /** A delay on the link to the gateway: each packet of a call is held this long (both directions: twice). */
  readonly heldMs: number | undefined;
}

/** The faults that stall a worker's calls outside the deadline, as intervals. */
function stalls(history: readonly HistoryEvent[]): Stall[] {
  const open = new Map<number, NemesisEvent>();
  const out: Stall[] = [];
  const end = history.reduce((max, e) => Math.max(max, e.mono), 0);
  const close = (start: NemesisEvent, to: number): void => {
    const heldMs = start.stalls === "gateway-link" ? (start.delayMs ?? 0) * (start.directions === "both" ? 2 : 1) : undefined;
    out.push({ from: start.mono, to, worker: start.stalls === "gateway" ? undefined : start.worker, heldMs });
  };
  for (const e of history) {
    if (e.type !== "nemesis" || e.stalls === undefined) continue;
    if (e.phase === "start") open.set(e.fault, e);
    else if (e.phase === "end") {
      const start = open.get(e.fault);
      open.delete(e.fault);
      if (start !== undefined) close(start, e.mono);
    }
  }
  for (const start of open.values()) close(start, end);
  return out;
}

function stalledMs(call: Call, worker: number, all: readonly Stall[]): number {
  let ms = 0;
  for (const s of all) {
    if (s.worker !== undefined && s.worker !== worker) continue;
    const overlap = Math.min(call.end, s.to) - Math.max(call.start, s.from);
    if (overlap < 0 || (overlap === 0 && s.heldMs === undefined)) continue;
    ms += s.heldMs ?? overlap;
  }
  return ms;
}

export function checkLiveness(history: readonly HistoryEvent[], ops: ReadonlyMap<string, Op>, options: LivenessOptions): LivenessResult {
  const all = stalls(history);
  const bound = options.deadlineMs + options.marginMs;
  let calls = 0;
  let late = 0;
  let slowest: SlowCall | undefined;
  const slowestByStep: Partial<Record<CallStep, SlowCall>> = {};
  const net = (c: SlowCall): number => c.ms - c.stalledMs;
  let firstLate: SlowCall | undefined;
  for (const op of ops.values()) {
    for (const e of op.events) {
      if (!("calls" in e) || e.calls === undefined) continue;
      for (const call of e.calls) {
        calls++;
        const stalled = stalledMs(call, op.worker, all);
        const slow = { op: op.id, worker: op.worker, step: call.step, start: call.start, ms: call.end - call.start, stalledMs: stalled };
        if (slowest === undefined || net(slow) > net(slowest)) slowest = slow;
        const ofStep = slowestByStep[call.step];
        if (ofStep === undefined || net(slow) > net(ofStep)) slowestByStep[call.step] = slow;
        if (net(slow) > bound) {
          late++;
          if (firstLate === undefined || slow.start < firstLate.start) firstLate = slow;
        }
      }
    }
  }
  const unanswered = [...ops.values()].filter((op) => op.outcome === undefined).length;
  return { deadlineMs: options.deadlineMs, marginMs: options.marginMs, calls, late, unanswered, slowest, slowestByStep, firstLate };
}

export function describeCall(call: SlowCall): string {
  const stalled = call.stalledMs > 0 ? ` (${Math.round(call.stalledMs)} ms of it stalled by the nemesis)` : "";
  return `${call.step} of ${call.op} (worker ${call.worker}) at ${(call.start / 1000).toFixed(1)} s took ${Math.round(call.ms)} ms${stalled}`;
}
