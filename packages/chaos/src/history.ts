import { readFileSync } from "node:fs";

/**
 * The history of one run: what every worker did (one operation = acquire → read → increment →
 * write → release), what the nemesis did, and what the counters held at the end. Tokens travel as
 * decimal strings (JSON has no bigint). `mono` is milliseconds since the run's origin on
 * CLOCK_MONOTONIC, which on Linux is one clock for every process on the machine, so events of
 * different workers can be ordered by it; `wall` is Date.now() of the process that recorded it.
 */

export type Mode = "unfenced" | "ratchet" | "full";
export type Backend = "postgres" | "s3";
export const MODES: readonly Mode[] = ["unfenced", "ratchet", "full"];
export const BACKENDS: readonly Backend[] = ["postgres", "s3"];
/** How workers take leases and write: with @fenced/lock and the store libraries in their own process, or through a fenced gateway process over HTTP. */
export type Via = "library" | "gateway";
export const VIAS: readonly Via[] = ["library", "gateway"];

interface Stamp {
  readonly mono: number;
  readonly wall: number;
}

interface OpStamp extends Stamp {
  /** "<worker>.<sequence>", unique in the run. */
  readonly op: string;
  readonly worker: number;
  readonly resource: string;
}

/**
 * Why an operation definitely did not write: the lock was not granted, the store refused the token
 * or the version, or something failed before the write was sent.
 */
export type FailReason = "lock" | "stale" | "version" | "error";

export type OpEvent =
  | (OpStamp & { readonly type: "invoke" })
  /**
   * `holder`: the lease's public id (Lease.holder), which the stores compare on equal tokens; never its secret value.
   * null: a lease the lock granted and the gateway released at once, because a store refused to register
   * its fence (`register: true`); the gateway does not disclose that lease's holder id, but it is a
   * lease of its own, distinct from every other.
   */
  | (OpStamp & { readonly type: "acquired"; readonly token: string; readonly holder: string | null })
  /** `head`: the op of the last increment in the document read (null: none), which links each write to the one it built on. */
  | (OpStamp & { readonly type: "read"; readonly token: string; readonly count: number; readonly head: string | null })
  | (OpStamp & {
      readonly type: "ok";
      readonly token: string;
      readonly holder: string;
      /** The counter value read, and the one written (read + 1). */
      readonly read: number;
      readonly wrote: number;
      /** When the write was sent: an ok that precedes this in `mono` was applied before this write. */
      readonly writeStart: number;
    })
  | (OpStamp & {
      readonly type: "fail";
      readonly reason: FailReason;
      readonly message: string;
      readonly token?: string;
      readonly holder?: string;
    })
  /** Indeterminate: the write was sent and its outcome is unknown (it may or may not have been applied). */
  | (OpStamp & {
      readonly type: "info";
      readonly message: string;
      readonly token: string;
      readonly holder: string;
      readonly writeStart: number;
    });

export type FaultKind =
  "pause-worker" | "pause-in-rmw" | "pause-redis" | "kill-redis" | "wipe-redis" | "clock-jump" | "delay" | "pause-gateway";
export const FAULT_KINDS: readonly FaultKind[] = [
  "pause-worker",
  "pause-in-rmw",
  "pause-redis",
  "kill-redis",
  "wipe-redis",
  "clock-jump",
  "delay",
  "pause-gateway",
];

/** A count of 0 for every fault kind. */
export function noFaults(): Record<FaultKind, number> {
  return Object.fromEntries(FAULT_KINDS.map((kind) => [kind, 0])) as Record<FaultKind, number>;
}

export interface NemesisEvent extends Stamp {
  readonly type: "nemesis";
  /** Index of the fault in the schedule. */
  readonly fault: number;
  readonly kind: FaultKind;
  /** "worker 2", "redis C", "worker 1 → store (up)", ... */
  readonly target: string;
  /** "missed": the fault found nothing to act on (a pause-in-rmw whose worker never reached that point). */
  readonly phase: "start" | "end" | "missed";
  /** Worker index the fault acts on, for the plot's lanes. */
  readonly worker?: number;
}

/** The counter document as read after every worker had exited. */
export interface FinalEvent extends Stamp {
  readonly type: "final";
  readonly resource: string;
  readonly count: number;
  readonly log: readonly string[];
}

export type HistoryEvent = OpEvent | NemesisEvent | FinalEvent;

/**
 * The counter document. `log` lists every increment the document has absorbed, in order, as
 * "<op>@<token>": the checker needs to know *which* increments survived, not only how many,
 * because an indeterminate write that landed would otherwise hide a lost one.
 */
export interface CounterDoc {
  readonly count: number;
  readonly log: readonly string[];
}

export const EMPTY_DOC: CounterDoc = { count: 0, log: [] };

export function logEntry(op: string, token: string): string {
  return `${op}@${token}`;
}

/** The op of the document's last increment, or null for the empty document. */
export function headOf(doc: CounterDoc): string | null {
  const last = doc.log[doc.log.length - 1];
  return last === undefined ? null : parseLogEntry(last).op;
}

export function parseLogEntry(entry: string): { op: string; token: string } {
  const at = entry.lastIndexOf("@");
  if (at <= 0) throw new Error(`malformed counter log entry ${JSON.stringify(entry)}`);
  return { op: entry.slice(0, at), token: entry.slice(at + 1) };
}

/** Parses a stored document; anything else than a CounterDoc is an error, not a counter of 0. */
export function parseDoc(value: unknown): CounterDoc {
  if (typeof value !== "object" || value === null) throw new Error(`counter document is not an object: ${JSON.stringify(value)}`);
  const { count, log } = value as { count?: unknown; log?: unknown };
  if (
    typeof count !== "number" ||
    !Number.isSafeInteger(count) ||
    !Array.isArray(log) ||
    !log.every((e): e is string => typeof e === "string")
  ) {
    throw new Error(`malformed counter document: ${JSON.stringify(value).slice(0, 200)}`);
  }
  return { count, log };
}

export function increment(doc: CounterDoc, op: string, token: string): CounterDoc {
  return { count: doc.count + 1, log: [...doc.log, logEntry(op, token)] };
}

/** Reads a history written by --out (one JSON object per line), for `pnpm chaos --check-history`. */
export function readHistoryFile(path: string): HistoryEvent[] {
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as HistoryEvent);
}

export function historyToJsonLines(history: readonly HistoryEvent[]): string {
  return history.map((e) => JSON.stringify(e)).join("\n") + "\n";
}

/** Milliseconds on CLOCK_MONOTONIC since `origin` (a process.hrtime.bigint() value, possibly another process's). */
export function monoSince(origin: bigint): number {
  return Number(process.hrtime.bigint() - origin) / 1e6;
}
