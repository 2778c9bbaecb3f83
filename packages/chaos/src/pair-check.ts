import { headOf, type FinalEvent, type HistoryEvent } from "./history.js";
import type { Chains, Op } from "./history-ops.js";

/**
 * The property of a pair written in one transaction (`--pairs` on PostgreSQL): both halves land, or
 * neither. The per-resource properties (lost updates, decreasing and duplicate tokens) judge each half
 * as an operation of its own resource; this one judges the two together.
 *
 * A pair is **torn** when one half is in some document (a read or the final counter held it) and the
 * other is proven never to have landed. The proof: the other half's resource was later found exactly
 * as that half had read it — a document whose last increment is the one the half built on, at the
 * same count — by a read that started after the pair had committed, or by the final read. Only the
 * write of that last increment produces such a document, and it committed before the half read it:
 * once the pair committed, the document can only look like that if the half never landed. An
 * overwrite does not qualify (it leaves a document ending in the overwriter), so a lost update is
 * never counted as a torn pair. The pair had committed by its acknowledgement, or by the end of the
 * first read that saw one of its halves, whichever came first (one server: a later snapshot sees
 * every commit an earlier one saw). Assumed, as everywhere in the checker: every write is applied at
 * most once (no client retries a whole write).
 */

export interface PairCounts {
  /** Pair operations in the history, and those written in one transaction. */
  readonly ops: number;
  readonly atomic: number;
  /** Atomic pairs of which at least one half was seen in a document: the ones atomicity was judged on. */
  readonly judged: number;
}

/** A read as the proof needs it: what it returned, and when its call started and ended. */
interface Read {
  readonly op: string;
  readonly head: string | null;
  readonly count: number;
  /** undefined when the operation reported no read call (it never completed). */
  readonly start: number | undefined;
  readonly end: number;
}

type Report = (resource: string, involved: string[], at: number, message: string) => void;

function readsByResource(history: readonly HistoryEvent[], ops: ReadonlyMap<string, Op>): Map<string, Read[]> {
  const out = new Map<string, Read[]>();
  for (const e of history) {
    if (e.type !== "read") continue;
    const calls = ops.get(e.op)?.events.flatMap((ev) => ("calls" in ev && ev.calls !== undefined ? ev.calls : [])) ?? [];
    const start = calls.find((c) => c.step === "read")?.start;
    const reads = out.get(e.resource) ?? [];
    reads.push({ op: e.op, head: e.head, count: e.count, start, end: e.mono });
    out.set(e.resource, reads);
  }
  for (const reads of out.values()) reads.sort((a, b) => a.end - b.end);
  return out;
}

export function tornPairs(
  history: readonly HistoryEvent[],
  ops: ReadonlyMap<string, Op>,
  chains: Chains,
  finals: ReadonlyMap<string, FinalEvent>,
  report: Report,
): PairCounts {
  const pairs = new Map<string, { atomic: boolean; halves: Op[] }>();
  for (const op of ops.values()) {
    if (op.pair === undefined) continue;
    const pair = pairs.get(op.pair.op) ?? { atomic: op.pair.atomic, halves: [] };
    pair.halves.push(op);
    pairs.set(op.pair.op, pair);
  }
  const reads = readsByResource(history, ops);
  /** When the earliest read of `half`'s resource that held its increment ended. */
  const firstSeen = (half: Op): number | undefined => {
    const position = chains.position(half.id);
    if (position === undefined) return undefined;
    for (const r of reads.get(half.resource) ?? []) {
      if (r.end < half.invoke || r.head === null) continue;
      if (chains.holds(r.head, half.id, position)) return r.end;
    }
    return undefined;
  };
  let atomic = 0;
  let judged = 0;
  for (const [pairOp, pair] of pairs) {
    if (!pair.atomic) continue;
    atomic++;
    const landed = pair.halves.filter((h) => chains.observed.has(h.id));
    if (landed.length === 0) continue;
    judged++;
    if (landed.length === pair.halves.length) continue;
    const acked = pair.halves.find((h) => h.outcome === "ok")?.end;
    const seen = landed.map(firstSeen).filter((t): t is number => t !== undefined);
    const committed = Math.min(acked ?? Infinity, ...seen);
    const witness = landed[0] as Op;
    for (const half of pair.halves) {
      if (landed.includes(half)) continue;
      const link = chains.link(half.id);
      if (link === undefined) continue; // it never read, so it never wrote: a pair whose other half landed is another matter (below)
      const asRead = (head: string | null, count: number): boolean => head === link.head && count === link.position - 1;
      const final = finals.get(half.resource);
      let proof: { by: string; at: number } | undefined;
      if (final !== undefined && asRead(headOf(final), final.count)) proof = { by: "the final counter", at: final.mono };
      else {
        const later = (reads.get(half.resource) ?? []).find(
          (r) => r.op !== half.id && r.start !== undefined && r.start > committed && asRead(r.head, r.count),
        );
        if (later !== undefined) proof = { by: `${later.op}'s read (started at ${later.start?.toFixed(1)} ms)`, at: later.end };
      }
      if (proof === undefined) continue;
      report(
        half.resource,
        [half.id, witness.id],
        proof.at,
        `pair ${pairOp} is torn: ${witness.id} (${witness.resource}) landed, but ${proof.by} found ${half.resource} as ${half.id} had read it (count ${link.position - 1}), after the pair had committed`,
      );
    }
  }
  // A half that landed while its partner never even read is torn too: one transaction wrote both or neither.
  for (const [pairOp, pair] of pairs) {
    if (!pair.atomic) continue;
    const unread = pair.halves.find((h) => chains.link(h.id) === undefined);
    const landed = pair.halves.find((h) => chains.observed.has(h.id));
    if (unread !== undefined && landed !== undefined)
      report(
        landed.resource,
        [landed.id, unread.id],
        landed.end ?? landed.invoke,
        `pair ${pairOp} is torn: ${landed.id} landed, ${unread.id} never read`,
      );
  }
  return { ops: pairs.size, atomic, judged };
}
