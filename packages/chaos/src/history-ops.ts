import type { FailReason, HistoryEvent, OpEvent, PairOf } from "./history.js";
import { parseLogEntry } from "./history.js";

/**
 * A history regrouped by operation, and the chains of documents the operations' reads saw: what the
 * checker's properties are judged on.
 */

export interface Op {
  id: string;
  worker: number;
  resource: string;
  events: OpEvent[];
  invoke: number;
  end: number | undefined;
  outcome: "ok" | "fail" | "info" | undefined;
  reason: FailReason | undefined;
  token: string | undefined;
  holder: string | undefined;
  writeStart: number | undefined;
  /** A half of a pair operation: its pair. */
  pair: PairOf | undefined;
}

export function collectOps(history: readonly HistoryEvent[]): Map<string, Op> {
  const ops = new Map<string, Op>();
  for (const e of history) {
    if (e.type === "nemesis" || e.type === "final") continue;
    let op = ops.get(e.op);
    if (op === undefined) {
      op = {
        id: e.op,
        worker: e.worker,
        resource: e.resource,
        events: [],
        invoke: e.mono,
        end: undefined,
        outcome: undefined,
        reason: undefined,
        token: undefined,
        holder: undefined,
        writeStart: undefined,
        pair: undefined,
      };
      ops.set(e.op, op);
    }
    op.events.push(e);
    if (e.type === "invoke") {
      op.invoke = e.mono;
      if (e.pair !== undefined) op.pair = e.pair;
    }
    if (e.type === "acquired" || e.type === "ok" || e.type === "fail" || e.type === "info") {
      if (e.token !== undefined) op.token = e.token;
      // null: a lease whose holder id was not disclosed (refused at registration); it never writes.
      if (e.holder !== undefined && e.holder !== null) op.holder = e.holder;
    }
    if (e.type === "ok" || e.type === "fail" || e.type === "info") {
      op.outcome = e.type;
      op.end = e.mono;
      if (e.type === "fail") op.reason = e.reason;
      else op.writeStart = e.writeStart;
    }
  }
  return ops;
}

/** Where a write sits: the increment last in the document it read (`head`), and its own position (count read + 1). */
export interface Link {
  readonly head: string | null;
  readonly position: number;
}

/**
 * The documents of one run as chains: each write built on the document it read, so `parent` links it
 * to that document's last increment, and whether a document held an increment is answered by walking
 * down its chain. An increment sits at position `count read + 1` of every document that holds it, so
 * a walk stops as soon as it is at or below the position looked for.
 */
export class Chains {
  private readonly parent = new Map<string, Link>();
  /** Ops whose increment some document held: what the reads saw (their heads' chains) and the final logs. */
  readonly observed = new Set<string>();

  constructor(history: readonly HistoryEvent[]) {
    for (const e of history) if (e.type === "read") this.parent.set(e.op, { head: e.head, position: e.count + 1 });
    for (const e of history) {
      if (e.type === "read" && e.head !== null) this.observe(e.head);
      if (e.type === "final") for (const entry of e.log) this.observed.add(parseLogEntry(entry).op);
    }
  }

  link(op: string): Link | undefined {
    return this.parent.get(op);
  }

  /** The position `op`'s write took in its document, if it read one. */
  position(op: string): number | undefined {
    return this.parent.get(op)?.position;
  }

  /** The write in `op`'s line at `position` (or, if the line is shorter, its last write). */
  ancestorAt(op: string, position: number): string {
    for (let cur = op; ;) {
      const link = this.parent.get(cur);
      if (link === undefined || link.position <= position || link.head === null) return cur;
      cur = link.head;
    }
  }

  /** Whether the document `writer` wrote held `target`'s increment, which sits at `position`. */
  holds(writer: string, target: string, position: number): boolean {
    for (let cur: string | null = writer; ;) {
      if (cur === target) return true;
      const link: Link | undefined = cur === null ? undefined : this.parent.get(cur);
      if (link === undefined || link.position <= position) return false;
      cur = link.head;
    }
  }

  /** Marks `head` and every increment below it in its chain (stopping at one already marked: its chain is). */
  private observe(head: string): void {
    for (let cur: string | null = head; cur !== null && !this.observed.has(cur);) {
      this.observed.add(cur);
      cur = this.parent.get(cur)?.head ?? null;
    }
  }
}
