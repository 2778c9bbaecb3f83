import {
  OUTCOMES,
  outcomeOfReason,
  parseLogEntry,
  type FailReason,
  type FinalEvent,
  type HistoryEvent,
  type NemesisEvent,
  type Outcome,
} from "./history.js";
import { Chains, collectOps, type Op } from "./history-ops.js";
import { checkLiveness, type LivenessOptions, type LivenessResult } from "./liveness.js";
import { tornPairs, type PairCounts } from "./pair-check.js";
import { TokenWatch } from "./token-watch.js";

/**
 * Checks a history against the three safety properties of a fenced counter:
 *
 * - **lost-update**: every acknowledged increment is in the final counter. The counter document logs
 *   which operations it absorbed, so a missing one is found by name, whatever else landed.
 * - **token-decrease**: tokens accepted per resource never decrease. Write X was applied before
 *   write Y if X was acknowledged before Y was sent (one monotonic clock for all processes); then Y
 *   must not carry a lower token. The final document's log gives the exact order of the writes that
 *   survived, and is checked too.
 * - **duplicate-token**: no two accepted writes carry the same token from different leases. Leases
 *   are told apart by their holder id (Lease.holder, what the stores compare on an equal token),
 *   never by worker or operation: one holder writing twice with its token is not a duplicate.
 *
 * - **torn-pair**: a pair of resources written in one transaction (`--pairs` on PostgreSQL) landed
 *   by halves: one half is in a document, the other provably never landed (pair-check.ts). Each half
 *   of a pair is also an operation of its own resource, judged by the three properties above.
 *
 * Besides the violations it counts the **repeated tokens**: acquisitions that got a token the lock
 * had already handed to another holder of the same resource. They are not a violation of the store
 * (the lock repeats a token only when a majority of its nodes lost the counter, which the nemesis
 * causes on purpose); what the store does with them is what the three properties judge.
 *
 * An operation whose outcome is unknown (an `info` event: the write was sent, its answer lost) is
 * resolved from the documents: it **landed** if a later read or the final counter held its increment
 * (its chain of reads shows it), and is then judged as the applied write it was — by the three
 * properties, except that it was never acknowledged; otherwise it was **not seen**, and is judged as
 * not applied. In "full", where every write builds on the version it read, not seen means not
 * applied; elsewhere it may also mean applied and overwritten before anyone read it.
 *
 * Only what the history proves is reported: a write not seen is never counted as lost, and a pair
 * whose order the timestamps cannot establish is never counted as decreasing.
 *
 * Liveness (liveness.ts) is checked beside: every call answered within the deadline plus a margin.
 */

export type ViolationKind = "lost-update" | "token-decrease" | "duplicate-token" | "torn-pair";
export const VIOLATION_KINDS: readonly ViolationKind[] = ["lost-update", "token-decrease", "duplicate-token", "torn-pair"];

export interface Violation {
  readonly kind: ViolationKind;
  readonly resource: string;
  /** The operations involved: the victim first. */
  readonly ops: readonly string[];
  readonly message: string;
  /** When the violation became visible (run ms): what "first" means. */
  readonly at: number;
  /** The events of the operations involved and the faults active meanwhile, in time order. */
  readonly subHistory: readonly HistoryEvent[];
}

export interface CheckResult {
  readonly valid: boolean;
  readonly ops: {
    readonly total: number;
    readonly ok: number;
    readonly fail: number;
    readonly info: number;
    readonly byOutcome: Readonly<Record<Outcome, number>>;
    readonly failByReason: Readonly<Record<FailReason, number>>;
    /** Outcome unknown, resolved: its increment seen in a document afterwards, or not. */
    readonly outcomeUnknown: { readonly landed: number; readonly notSeen: number };
    /** Invoked but never completed (the process never reported back). */
    readonly incomplete: number;
    /** The classes and codes of the errors that ended operations, with their counts. */
    readonly errors: Readonly<Record<string, number>>;
  };
  readonly violations: Readonly<Record<ViolationKind, number>>;
  /** Pair operations (`--pairs`), and on how many atomicity was judged. */
  readonly pairs: PairCounts;
  readonly liveness: LivenessResult;
  /** Acquisitions whose token another holder of the same resource had acquired before: for each (resource, token), holders − 1. */
  readonly repeatedTokens: number;
  /** Acquisitions whose token is below one acquired earlier on the same resource (in the history's time order). */
  readonly tokenRegressions: number;
  /** The earliest violation of each kind. */
  readonly first: Partial<Readonly<Record<ViolationKind, Violation>>>;
  /** The earliest violation of any kind. */
  readonly firstViolation: Violation | undefined;
  /** Every operation a violation is about (its first op: the lost one, the late writer, the duplicates). */
  readonly victims: readonly string[];
  readonly final: Readonly<Record<string, { readonly count: number; readonly increments: number }>>;
  /** Definite failures (refused, unavailable) whose increment a document held anyway (not a safety violation; see PROTOCOL.md on ambiguous S3 outcomes). */
  readonly failedButApplied: number;
}

/** The store's default deadline of the chaos runs, and the margin liveness allows beyond it. */
export const DEFAULT_LIVENESS: LivenessOptions = { deadlineMs: 2_000, marginMs: 1_500 };

/** A write judged as applied: acknowledged, or of unknown outcome and seen landed. */
interface Applied {
  readonly op: string;
  readonly resource: string;
  readonly token: string;
  /** Its position in the document it wrote. */
  readonly position: number;
  readonly writeStart: number;
  /** When it was acknowledged; undefined for a write of unknown outcome. */
  readonly ack: number | undefined;
  /** When its outcome was reported. */
  readonly mono: number;
}

interface Context {
  readonly ops: ReadonlyMap<string, Op>;
  readonly chains: Chains;
  readonly finals: ReadonlyMap<string, FinalEvent>;
  /** The final counter's increments, by resource. */
  readonly surviving: ReadonlyMap<string, ReadonlySet<string>>;
  readonly applied: readonly Applied[];
  violation(kind: ViolationKind, resource: string, involved: string[], at: number, message: string): void;
}

function appliedWrites(history: readonly HistoryEvent[], chains: Chains): Applied[] {
  const out: Applied[] = [];
  for (const e of history) {
    if (e.type === "ok")
      out.push({ op: e.op, resource: e.resource, token: e.token, position: e.wrote, writeStart: e.writeStart, ack: e.mono, mono: e.mono });
    else if (e.type === "info" && chains.observed.has(e.op)) {
      const position = chains.position(e.op);
      if (position !== undefined)
        out.push({ op: e.op, resource: e.resource, token: e.token, position, writeStart: e.writeStart, ack: undefined, mono: e.mono });
    }
  }
  return out;
}

/** Lost updates: applied (acknowledged, or seen landed), and absent from the final counter of its resource. */
function lostUpdates(ctx: Context): void {
  const acked = ctx.applied.filter((w) => w.ack !== undefined);
  for (const w of ctx.applied) {
    if (ctx.surviving.get(w.resource)?.has(w.op) === true) continue;
    // Who overwrote it: the first write acknowledged after it was sent whose document did not hold it
    // builds on a line that replaced it; the write of that line at its position took its place.
    const since = w.ack ?? w.writeStart;
    const first = acked.find((o) => o.resource === w.resource && o.mono > since && !ctx.chains.holds(o.op, w.op, w.position));
    const culprit = first === undefined ? undefined : ctx.chains.ancestorAt(first.op, w.position);
    const involved = culprit === undefined ? [w.op] : [w.op, culprit];
    const by =
      culprit === undefined
        ? ""
        : `; overwritten by ${culprit} (token ${ctx.ops.get(culprit)?.token ?? "?"}), which had read ${(ctx.chains.position(culprit) ?? 0) - 1}`;
    const what = w.ack === undefined ? "had an unknown outcome but was seen landed" : "was acknowledged";
    ctx.violation(
      "lost-update",
      w.resource,
      involved,
      w.mono,
      `${w.op} (token ${w.token}) ${what} writing ${w.position} but is not in the final counter${by}`,
    );
  }
}

/**
 * Decreasing tokens, by real time: sweep the applied writes in the order they were sent, keeping the
 * highest token among the writes acknowledged before that moment; then along the chain of surviving
 * writes, whose order the document itself records.
 */
function tokenDecreases(ctx: Context): void {
  const byResource = new Map<string, Applied[]>();
  for (const w of ctx.applied) byResource.set(w.resource, [...(byResource.get(w.resource) ?? []), w]);
  const decreased = new Set<string>();
  for (const [resource, writes] of byResource) {
    const byAck = writes.filter((w) => w.ack !== undefined).sort((a, b) => (a.ack ?? 0) - (b.ack ?? 0));
    const bySend = [...writes].sort((a, b) => a.writeStart - b.writeStart);
    let i = 0;
    let highest: Applied | undefined;
    for (const y of bySend) {
      for (; i < byAck.length && (byAck[i]?.ack ?? Infinity) < y.writeStart; i++) {
        const x = byAck[i];
        if (x !== undefined && (highest === undefined || BigInt(x.token) > BigInt(highest.token))) highest = x;
      }
      if (highest !== undefined && BigInt(y.token) < BigInt(highest.token)) {
        decreased.add(y.op);
        const msg = `${y.op} wrote with token ${y.token} after ${highest.op} had been acknowledged with token ${highest.token}`;
        ctx.violation("token-decrease", resource, [y.op, highest.op], y.mono, msg);
      }
    }
  }
  for (const [resource, final] of ctx.finals) {
    const entries = final.log.map(parseLogEntry);
    for (let k = 1; k < entries.length; k++) {
      const prev = entries[k - 1];
      const cur = entries[k];
      if (prev === undefined || cur === undefined || decreased.has(cur.op) || BigInt(cur.token) >= BigInt(prev.token)) continue;
      decreased.add(cur.op);
      const at = ctx.ops.get(cur.op)?.end ?? final.mono;
      const msg = `in the final counter, ${cur.op} (token ${cur.token}) directly follows ${prev.op} (token ${prev.token})`;
      ctx.violation("token-decrease", resource, [cur.op, prev.op], at, msg);
    }
  }
}

/** Duplicate tokens: accepted writes (acknowledged, or seen in a document) of different holders with the same token on one resource. */
function duplicateTokens(ctx: Context): void {
  const writers = new Map<string, Map<string, string>>(); // "resource@token" → holder → its first accepted op
  const accepted = new Set<string>([...ctx.applied.filter((w) => w.ack !== undefined).map((w) => w.op), ...ctx.chains.observed]);
  for (const id of accepted) {
    const op = ctx.ops.get(id);
    if (op?.token === undefined) continue;
    if (op.holder === undefined)
      throw new Error(
        `operation ${id} wrote with token ${op.token} but the history names no holder for it: duplicate tokens cannot be judged`,
      );
    const slot = `${op.resource}@${op.token}`;
    const byHolder = writers.get(slot) ?? new Map<string, string>();
    writers.set(slot, byHolder);
    if (!byHolder.has(op.holder)) byHolder.set(op.holder, id);
  }
  for (const [slot, byHolder] of writers) {
    if (byHolder.size < 2) continue;
    const involved = [...byHolder.values()];
    const at = Math.max(...involved.map((id) => ctx.ops.get(id)?.end ?? 0));
    const resource = slot.slice(0, slot.lastIndexOf("@"));
    const holders = [...byHolder.keys()].map((h) => `${h.slice(0, 8)}…`).join(", ");
    const token = slot.slice(slot.lastIndexOf("@") + 1);
    ctx.violation(
      "duplicate-token",
      resource,
      involved,
      at,
      `${involved.join(", ")} were accepted with the same token ${token} from ${byHolder.size} different holders (${holders})`,
    );
  }
}

function countOps(ops: ReadonlyMap<string, Op>, chains: Chains): CheckResult["ops"] {
  const all = [...ops.values()];
  const byOutcome = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<Outcome, number>;
  const failByReason: Record<FailReason, number> = { lock: 0, stale: 0, version: 0, refused: 0, unavailable: 0, error: 0 };
  const errors: Record<string, number> = {};
  const outcomeUnknown = { landed: 0, notSeen: 0 };
  for (const op of all) {
    if (op.outcome === "ok") byOutcome.ok++;
    else if (op.outcome === "info") {
      byOutcome["outcome-unknown"]++;
      if (chains.observed.has(op.id)) outcomeUnknown.landed++;
      else outcomeUnknown.notSeen++;
    } else if (op.outcome === "fail" && op.reason !== undefined) {
      failByReason[op.reason]++;
      byOutcome[outcomeOfReason(op.reason)]++;
    }
    for (const e of op.events)
      if ((e.type === "fail" || e.type === "info") && e.error !== undefined) errors[e.error] = (errors[e.error] ?? 0) + 1;
  }
  return {
    total: all.length,
    ok: byOutcome.ok,
    fail: all.filter((o) => o.outcome === "fail").length,
    info: byOutcome["outcome-unknown"],
    byOutcome,
    failByReason,
    outcomeUnknown,
    incomplete: all.filter((o) => o.outcome === undefined).length,
    errors,
  };
}

export function check(history: readonly HistoryEvent[], liveness: LivenessOptions = DEFAULT_LIVENESS): CheckResult {
  const ops = collectOps(history);
  const chains = new Chains(history);
  const faults = history.filter((e): e is NemesisEvent => e.type === "nemesis");
  const finals = new Map<string, FinalEvent>();
  for (const e of history) if (e.type === "final") finals.set(e.resource, e);
  const surviving = new Map<string, Set<string>>();
  for (const resource of new Set([...history.flatMap((e) => (e.type === "ok" ? [e.resource] : [])), ...finals.keys()])) {
    const final = finals.get(resource);
    if (final === undefined) throw new Error(`the history has no final read of resource ${JSON.stringify(resource)}: it cannot be checked`);
    surviving.set(resource, new Set(final.log.map((entry) => parseLogEntry(entry).op)));
  }
  const violations: Violation[] = [];
  const subHistory = (involved: readonly string[]): HistoryEvent[] => {
    const events = involved.flatMap((id) => ops.get(id)?.events ?? []);
    const from = Math.min(...events.map((e) => e.mono));
    const to = Math.max(...events.map((e) => e.mono));
    const during = faults.filter((f) => f.mono >= from && f.mono <= to);
    return [...events, ...during].sort((a, b) => a.mono - b.mono);
  };
  const ctx: Context = {
    ops,
    chains,
    finals,
    surviving,
    applied: appliedWrites(history, chains),
    violation: (kind, resource, involved, at, message) =>
      violations.push({ kind, resource, ops: involved, at, message, subHistory: subHistory(involved) }),
  };
  lostUpdates(ctx);
  tokenDecreases(ctx);
  duplicateTokens(ctx);
  const pairs = tornPairs(history, ops, chains, finals, (resource, involved, at, message) =>
    ctx.violation("torn-pair", resource, involved, at, message),
  );

  const tokens = TokenWatch.of(history);
  const counts: Record<ViolationKind, number> = { "lost-update": 0, "token-decrease": 0, "duplicate-token": 0, "torn-pair": 0 };
  const first: Partial<Record<ViolationKind, Violation>> = {};
  violations.sort((a, b) => a.at - b.at);
  for (const v of violations) {
    counts[v.kind]++;
    first[v.kind] ??= v;
  }
  const final: Record<string, { count: number; increments: number }> = {};
  for (const [resource, f] of finals) final[resource] = { count: f.count, increments: f.log.length };
  return {
    valid: violations.length === 0,
    ops: countOps(ops, chains),
    violations: counts,
    pairs,
    liveness: checkLiveness(history, ops, liveness),
    repeatedTokens: tokens.repeated,
    tokenRegressions: tokens.regressions,
    first,
    firstViolation: violations[0],
    victims: [...new Set(violations.flatMap((v) => (v.kind === "duplicate-token" ? v.ops : v.ops.slice(0, 1))))],
    final,
    failedButApplied: [...ops.values()].filter((op) => op.outcome === "fail" && chains.observed.has(op.id)).length,
  };
}

/** One event as a short line, for the report. */
export function describeEvent(e: HistoryEvent): string {
  const t = `${e.mono.toFixed(1).padStart(9)} ms`;
  switch (e.type) {
    case "nemesis":
      return `${t}  nemesis  ${e.kind} ${e.phase}: ${e.target}`;
    case "final":
      return `${t}  final    ${e.resource}: count ${e.count}`;
    case "invoke":
      return `${t}  ${e.op.padEnd(8)} invoke ${e.resource}${e.pair === undefined ? "" : ` (half of pair ${e.pair.halves.join(" + ")})`}`;
    case "acquired":
      return `${t}  ${e.op.padEnd(8)} acquired token ${e.token} (${e.holder === null ? "holder undisclosed: registration refused" : `holder ${e.holder.slice(0, 8)}…`})`;
    case "read":
      return `${t}  ${e.op.padEnd(8)} read ${e.count} (token ${e.token})`;
    case "ok":
      return `${t}  ${e.op.padEnd(8)} ok: wrote ${e.wrote} with token ${e.token} (sent at ${e.writeStart.toFixed(1)})`;
    case "fail":
      return `${t}  ${e.op.padEnd(8)} fail (${e.reason}): ${e.message.slice(0, 120)}`;
    case "info":
      return `${t}  ${e.op.padEnd(8)} outcome unknown: ${e.message.slice(0, 120)}`;
    case "released":
      return `${t}  ${e.op.padEnd(8)} released`;
  }
}
