import { readFileSync } from "node:fs";

/**
 * The history of one run: what every worker did (one operation = acquire → read → increment →
 * write → release), what the nemesis did, and what the counters held at the end. Tokens travel as
 * decimal strings (JSON has no bigint). `mono` is milliseconds since the run's origin on
 * CLOCK_MONOTONIC, which on Linux is one clock for every process on the machine, so events of
 * different workers can be ordered by it; `wall` is Date.now() of the process that recorded it.
 */

export type Mode = "unfenced" | "ratchet" | "full";
export type Backend = "postgres" | "s3" | "dynamodb" | "azure-blob";
export const MODES: readonly Mode[] = ["unfenced", "ratchet", "full"];
export const BACKENDS: readonly Backend[] = ["postgres", "s3", "dynamodb", "azure-blob"];
/** `--backend both`, the default: the two backends `pnpm chaos` has always run (and CI runs). `all` is every one of BACKENDS. */
export const DEFAULT_BACKENDS: readonly Backend[] = ["postgres", "s3"];
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
 * Why an operation definitely did not write:
 * - refused: the store (or the gateway) refused the token ("stale"), the version ("version") or the
 *   request ("refused": any other refusal, a resource mismatch, a 4xx);
 * - unavailable: no lease this time ("lock": LockNotAcquired, no quorum, the lock held past the
 *   deadline), or the store could not serve a call and applied nothing ("unavailable":
 *   StoreUnavailableError, a gateway's 503 `/problems/unavailable`, a read or a call before the write
 *   that failed);
 * - "error": an error no class describes. Every backend fault has a class; this one is a finding.
 */
export type FailReason = "lock" | "stale" | "version" | "refused" | "unavailable" | "error";

/**
 * An operation's outcome, as the report counts them. "outcome-unknown" is the `info` event: the write
 * was sent and its answer lost (OutcomeUnknownError, a gateway's 503 `/problems/outcome-unknown`, a
 * connection reset after the write left): it may have landed. The checker resolves each one from the
 * documents read afterwards.
 */
export type Outcome = "ok" | "refused" | "unavailable" | "outcome-unknown" | "error";
export const OUTCOMES: readonly Outcome[] = ["ok", "refused", "unavailable", "outcome-unknown", "error"];

export function outcomeOfReason(reason: FailReason): Outcome {
  switch (reason) {
    case "stale":
    case "version":
    case "refused":
      return "refused";
    case "lock":
    case "unavailable":
      return "unavailable";
    case "error":
      return "error";
  }
}

/** One call an operation made and waited for: what liveness is judged on. Times in run ms. */
export type CallStep = "acquire" | "register" | "read" | "write" | "release";
export interface Call {
  readonly step: CallStep;
  readonly start: number;
  readonly end: number;
}

/**
 * A half of a pair operation (`--pairs`): one lease of two resources, a counter incremented under
 * each. The pair's halves are operations of their own in the history ("<op>a", "<op>b", in the
 * lease's order), one per resource, each with that resource's token; what the lease and an atomic
 * write did is reported on both, their calls on the first.
 */
export interface PairOf {
  /** The pair operation, "<worker>.<sequence>". */
  readonly op: string;
  /** Its halves' operation ids, in the lease's order. */
  readonly halves: readonly string[];
  /** Both halves were written in one transaction (PostgreSQL): they land together or not at all. */
  readonly atomic: boolean;
}

export type OpEvent =
  | (OpStamp & { readonly type: "invoke"; readonly pair?: PairOf })
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
      readonly calls?: readonly Call[];
    })
  | (OpStamp & {
      readonly type: "fail";
      readonly reason: FailReason;
      readonly message: string;
      readonly token?: string;
      readonly holder?: string;
      /** The error's class or code ("StoreUnavailableError", "ECONNRESET", "503 /problems/unavailable"). */
      readonly error?: string;
      readonly calls?: readonly Call[];
    })
  /** Outcome unknown: the write was sent and its answer was lost (it may or may not have been applied). */
  | (OpStamp & {
      readonly type: "info";
      readonly message: string;
      readonly token: string;
      readonly holder: string;
      readonly writeStart: number;
      readonly error?: string;
      readonly calls?: readonly Call[];
    })
  /** The lease was released (or the release failed) after the operation's outcome: its call, for liveness. */
  | (OpStamp & { readonly type: "released"; readonly calls: readonly Call[] });

/** Faults of the store server of the run's backend: SIGSTOP it, or SIGKILL it and restart it with its data. */
export type StoreFaultKind =
  "pause-postgres" | "kill-postgres" | "pause-s3" | "kill-s3" | "pause-dynamodb" | "kill-dynamodb" | "pause-azure-blob";
/**
 * The store faults of each backend. azurite (Azure Blob) is never killed: it keeps its blobs'
 * metadata in memory and saves it every 5 s, so a SIGKILL loses writes it has acknowledged — the
 * emulator's limit, not Azure's, which the checker would count as lost updates of the store.
 */
export const STORE_FAULT_KINDS = {
  postgres: { pause: "pause-postgres", kill: "kill-postgres" },
  s3: { pause: "pause-s3", kill: "kill-s3" },
  dynamodb: { pause: "pause-dynamodb", kill: "kill-dynamodb" },
  "azure-blob": { pause: "pause-azure-blob", kill: undefined },
} as const satisfies Readonly<Record<Backend, { readonly pause: StoreFaultKind; readonly kill: StoreFaultKind | undefined }>>;

/** Every fault that acts on a store server rather than the lock or a client: each backend's pause and kill, and S3's clock skew. */
export const STORE_FAULTS: ReadonlySet<FaultKind> = new Set<FaultKind>([
  ...Object.values(STORE_FAULT_KINDS).flatMap(({ pause, kill }): StoreFaultKind[] => (kill === undefined ? [pause] : [pause, kill])),
  "skew-s3",
]);

export type FaultKind =
  | "pause-worker"
  | "pause-in-rmw"
  | "pause-redis"
  | "kill-redis"
  | "wipe-redis"
  | "clock-jump"
  | "delay"
  | "reset"
  | "pause-gateway"
  | StoreFaultKind
  | "skew-s3";
const FAULT_KINDS: readonly FaultKind[] = [
  "pause-worker",
  "pause-in-rmw",
  "pause-redis",
  "kill-redis",
  "wipe-redis",
  "clock-jump",
  "delay",
  "reset",
  "pause-gateway",
  "pause-postgres",
  "kill-postgres",
  "pause-s3",
  "kill-s3",
  "pause-dynamodb",
  "kill-dynamodb",
  "pause-azure-blob",
  "skew-s3",
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
  /** What the fault stalls, when it holds up a worker's calls without the store's deadline seeing it: liveness allows for it. */
  readonly stalls?: "worker" | "gateway" | "gateway-link";
  /** A delay: how long it holds each packet, and in which directions. */
  readonly delayMs?: number;
  readonly directions?: "up" | "down" | "both";
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
