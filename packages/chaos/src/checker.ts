import { parseLogEntry, type FailReason, type FinalEvent, type HistoryEvent, type NemesisEvent, type OpEvent } from "./history.js";

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
 * Besides the violations it counts the **repeated tokens**: acquisitions that got a token the lock
 * had already handed to another holder of the same resource. They are not a violation of the store
 * (the lock repeats a token only when a majority of its nodes lost the counter, which the nemesis
 * causes on purpose); what the store does with them is what the three properties judge.
 *
 * Only what the history proves is reported: an indeterminate write ("info") is never counted as
 * lost, and a pair whose order the timestamps cannot establish is never counted as decreasing.
 */

export type ViolationKind = "lost-update" | "token-decrease" | "duplicate-token";
export const VIOLATION_KINDS: readonly ViolationKind[] = ["lost-update", "token-decrease", "duplicate-token"];

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
    readonly failByReason: Readonly<Record<FailReason, number>>;
    /** Invoked but never completed (the process never reported back). */
    readonly incomplete: number;
  };
  readonly violations: Readonly<Record<ViolationKind, number>>;
  /** Acquisitions whose token another holder of the same resource had acquired before: for each (resource, token), holders − 1. */
  readonly repeatedTokens: number;
  /** The earliest violation of each kind. */
  readonly first: Partial<Readonly<Record<ViolationKind, Violation>>>;
  /** The earliest violation of any kind. */
  readonly firstViolation: Violation | undefined;
  /** Every operation a violation is about (its first op: the lost one, the late writer, the duplicates). */
  readonly victims: readonly string[];
  readonly final: Readonly<Record<string, { readonly count: number; readonly increments: number }>>;
  /** Definite failures whose increment is in the final counter anyway (not a safety violation; see PROTOCOL.md on ambiguous S3 outcomes). */
  readonly failedButApplied: number;
}

interface Op {
  id: string;
  resource: string;
  events: OpEvent[];
  invoke: number;
  end: number | undefined;
  outcome: "ok" | "fail" | "info" | undefined;
  token: string | undefined;
  holder: string | undefined;
  writeStart: number | undefined;
}

type Ok = Extract<OpEvent, { type: "ok" }>;

function collectOps(history: readonly HistoryEvent[]): Map<string, Op> {
  const ops = new Map<string, Op>();
  for (const e of history) {
    if (e.type === "nemesis" || e.type === "final") continue;
    let op = ops.get(e.op);
    if (op === undefined) {
      op = {
        id: e.op,
        resource: e.resource,
        events: [],
        invoke: e.mono,
        end: undefined,
        outcome: undefined,
        token: undefined,
        holder: undefined,
        writeStart: undefined,
      };
      ops.set(e.op, op);
    }
    op.events.push(e);
    if (e.type === "invoke") op.invoke = e.mono;
    if (e.type === "acquired" || e.type === "ok" || e.type === "fail" || e.type === "info") {
      if (e.token !== undefined) op.token = e.token;
      // null: a lease whose holder id was not disclosed (refused at registration); it never writes.
      if (e.holder !== undefined && e.holder !== null) op.holder = e.holder;
    }
    if (e.type === "ok" || e.type === "fail" || e.type === "info") {
      op.outcome = e.type;
      op.end = e.mono;
      if (e.type !== "fail") op.writeStart = e.writeStart;
    }
  }
  return ops;
}

export function check(history: readonly HistoryEvent[]): CheckResult {
  const ops = collectOps(history);
  const faults = history.filter((e): e is NemesisEvent => e.type === "nemesis");
  const finals = new Map<string, FinalEvent>();
  for (const e of history) if (e.type === "final") finals.set(e.resource, e);
  const acked = history.filter((e): e is Ok => e.type === "ok");
  const violations: Violation[] = [];

  const subHistory = (involved: readonly string[]): HistoryEvent[] => {
    const events = involved.flatMap((id) => ops.get(id)?.events ?? []);
    const from = Math.min(...events.map((e) => e.mono));
    const to = Math.max(...events.map((e) => e.mono));
    const during = faults.filter((f) => f.mono >= from && f.mono <= to);
    return [...events, ...during].sort((a, b) => a.mono - b.mono);
  };
  const violation = (kind: ViolationKind, resource: string, involved: string[], at: number, message: string): void => {
    violations.push({ kind, resource, ops: involved, at, message, subHistory: subHistory(involved) });
  };

  // Lost updates: acknowledged, and absent from the final counter of its resource.
  const applied = new Map<string, Set<string>>();
  for (const resource of new Set([...acked.map((e) => e.resource), ...finals.keys()])) {
    const final = finals.get(resource);
    if (final === undefined) throw new Error(`the history has no final read of resource ${JSON.stringify(resource)}: it cannot be checked`);
    applied.set(resource, new Set(final.log.map((entry) => parseLogEntry(entry).op)));
  }
  // Each write built on the document it read: `parent` links it to that document's last increment,
  // so whether a write's document held an increment can be answered by walking up the chain.
  // An increment sits at position `count read + 1` of every document that holds it, so the walk
  // stops as soon as it is at or below the target's position.
  const parent = new Map<string, { head: string | null; position: number }>();
  for (const e of history) if (e.type === "read") parent.set(e.op, { head: e.head, position: e.count + 1 });
  /** The write in `op`'s line at `position` (or, if the line is shorter, its last write). */
  const ancestorAt = (op: string, position: number): string => {
    for (let cur = op; ;) {
      const link = parent.get(cur);
      if (link === undefined || link.position <= position || link.head === null) return cur;
      cur = link.head;
    }
  };
  const holds = (writer: string, target: Ok): boolean => {
    for (let cur: string | null = writer; ;) {
      if (cur === target.op) return true;
      const link: { head: string | null; position: number } | undefined = cur === null ? undefined : parent.get(cur);
      if (link === undefined || link.position <= target.wrote) return false;
      cur = link.head;
    }
  };
  for (const ok of acked) {
    if (applied.get(ok.resource)?.has(ok.op) === true) continue;
    // Who overwrote it: the first write acknowledged after it whose document did not hold it builds
    // on a line that replaced it; the write of that line at its position is the one that took its place.
    const first = acked.find((o) => o.resource === ok.resource && o.mono > ok.mono && !holds(o.op, ok));
    const culprit = first === undefined ? undefined : ancestorAt(first.op, ok.wrote);
    const involved = culprit === undefined ? [ok.op] : [ok.op, culprit];
    const by =
      culprit === undefined
        ? ""
        : `; overwritten by ${culprit} (token ${ops.get(culprit)?.token ?? "?"}), which had read ${(parent.get(culprit)?.position ?? 0) - 1}`;
    violation(
      "lost-update",
      ok.resource,
      involved,
      ok.mono,
      `${ok.op} (token ${ok.token}) was acknowledged writing ${ok.wrote} but is not in the final counter${by}`,
    );
  }

  // Decreasing tokens, by real time: sweep the writes in the order they were sent, keeping the
  // highest token among the writes acknowledged before that moment.
  const byResource = new Map<string, Ok[]>();
  for (const ok of acked) {
    const list = byResource.get(ok.resource);
    if (list === undefined) byResource.set(ok.resource, [ok]);
    else list.push(ok);
  }
  const decreased = new Set<string>();
  for (const [resource, oks] of byResource) {
    const byAck = [...oks].sort((a, b) => a.mono - b.mono);
    const bySend = [...oks].sort((a, b) => a.writeStart - b.writeStart);
    let i = 0;
    let highest: Ok | undefined;
    for (const y of bySend) {
      for (; i < byAck.length && (byAck[i]?.mono ?? Infinity) < y.writeStart; i++) {
        const x = byAck[i];
        if (x !== undefined && (highest === undefined || BigInt(x.token) > BigInt(highest.token))) highest = x;
      }
      if (highest !== undefined && BigInt(y.token) < BigInt(highest.token)) {
        decreased.add(y.op);
        violation(
          "token-decrease",
          resource,
          [y.op, highest.op],
          y.mono,
          `${y.op} wrote with token ${y.token} after ${highest.op} had been acknowledged with token ${highest.token}`,
        );
      }
    }
  }
  // ... and along the chain of surviving writes, whose order the document itself records.
  for (const [resource, final] of finals) {
    const entries = final.log.map(parseLogEntry);
    for (let k = 1; k < entries.length; k++) {
      const prev = entries[k - 1];
      const cur = entries[k];
      if (prev === undefined || cur === undefined || decreased.has(cur.op) || BigInt(cur.token) >= BigInt(prev.token)) continue;
      decreased.add(cur.op);
      const at = ops.get(cur.op)?.end ?? final.mono;
      violation(
        "token-decrease",
        resource,
        [cur.op, prev.op],
        at,
        `in the final counter, ${cur.op} (token ${cur.token}) directly follows ${prev.op} (token ${prev.token})`,
      );
    }
  }

  // Duplicate tokens: accepted writes (acknowledged, or present in the final counter) of different
  // holders that carry the same token on one resource.
  const writers = new Map<string, Map<string, string>>(); // "resource@token" → holder → its first accepted op
  const accepted = new Set<string>(acked.map((e) => e.op));
  for (const final of finals.values()) for (const entry of final.log) accepted.add(parseLogEntry(entry).op);
  for (const id of accepted) {
    const op = ops.get(id);
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
    const at = Math.max(...involved.map((id) => ops.get(id)?.end ?? 0));
    const resource = slot.slice(0, slot.lastIndexOf("@"));
    const holders = [...byHolder.keys()].map((h) => `${h.slice(0, 8)}…`).join(", ");
    violation(
      "duplicate-token",
      resource,
      involved,
      at,
      `${involved.join(", ")} were accepted with the same token ${slot.slice(slot.lastIndexOf("@") + 1)} from ${byHolder.size} different holders (${holders})`,
    );
  }

  // Repeated tokens: the same (resource, token) acquired by more than one holder.
  const acquirers = new Map<string, Set<string>>(); // "resource@token" → holders
  for (const e of history) {
    if (e.type !== "acquired") continue;
    const slot = `${e.resource}@${e.token}`;
    const holders = acquirers.get(slot) ?? new Set<string>();
    // An undisclosed holder is still a lease of its own: every acquisition draws a fresh random value.
    acquirers.set(slot, holders.add(e.holder ?? `undisclosed:${e.op}`));
  }
  const repeatedTokens = [...acquirers.values()].reduce((sum, holders) => sum + holders.size - 1, 0);

  const counts: Record<ViolationKind, number> = { "lost-update": 0, "token-decrease": 0, "duplicate-token": 0 };
  const first: Partial<Record<ViolationKind, Violation>> = {};
  violations.sort((a, b) => a.at - b.at);
  for (const v of violations) {
    counts[v.kind]++;
    first[v.kind] ??= v;
  }

  const all = [...ops.values()];
  const failByReason: Record<FailReason, number> = { lock: 0, stale: 0, version: 0, error: 0 };
  for (const op of all) {
    if (op.outcome !== "fail") continue;
    const fail = op.events.find((e): e is Extract<OpEvent, { type: "fail" }> => e.type === "fail");
    if (fail !== undefined) failByReason[fail.reason]++;
  }
  const failedButApplied = all.filter((op) => op.outcome === "fail" && applied.get(op.resource)?.has(op.id) === true).length;
  const final: Record<string, { count: number; increments: number }> = {};
  for (const [resource, f] of finals) final[resource] = { count: f.count, increments: f.log.length };

  return {
    valid: violations.length === 0,
    ops: {
      total: all.length,
      ok: all.filter((o) => o.outcome === "ok").length,
      fail: all.filter((o) => o.outcome === "fail").length,
      info: all.filter((o) => o.outcome === "info").length,
      failByReason,
      incomplete: all.filter((o) => o.outcome === undefined).length,
    },
    violations: counts,
    repeatedTokens,
    first,
    firstViolation: violations[0],
    victims: [...new Set(violations.flatMap((v) => (v.kind === "duplicate-token" ? v.ops : v.ops.slice(0, 1))))],
    final,
    failedButApplied,
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
      return `${t}  ${e.op.padEnd(8)} invoke ${e.resource}`;
    case "acquired":
      return `${t}  ${e.op.padEnd(8)} acquired token ${e.token} (${e.holder === null ? "holder undisclosed: registration refused" : `holder ${e.holder.slice(0, 8)}…`})`;
    case "read":
      return `${t}  ${e.op.padEnd(8)} read ${e.count} (token ${e.token})`;
    case "ok":
      return `${t}  ${e.op.padEnd(8)} ok: wrote ${e.wrote} with token ${e.token} (sent at ${e.writeStart.toFixed(1)})`;
    case "fail":
      return `${t}  ${e.op.padEnd(8)} fail (${e.reason}): ${e.message.slice(0, 120)}`;
    case "info":
      return `${t}  ${e.op.padEnd(8)} indeterminate: ${e.message.slice(0, 120)}`;
  }
}
