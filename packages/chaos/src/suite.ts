import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DEFAULT_LIVENESS, describeEvent, VIOLATION_KINDS, type ViolationKind } from "./checker.js";
import { historyToJsonLines, noFaults, type Backend, type FaultKind, type Mode, type Outcome, type Via } from "./history.js";
import { describeCall } from "./liveness.js";
import { plotHistory } from "./plot.js";
import { runConfiguration, type RunResult } from "./run.js";
import { startStoreServer } from "./store-server.js";
import { wipeShown } from "./token-watch.js";

export interface ChaosOptions {
  /** Operations per configuration and backend. */
  readonly ops: number;
  readonly seed: number;
  readonly configs: readonly Mode[];
  readonly backends: readonly Backend[];
  /** How the workers take leases and write; default "library" (their own Redlock and store clients). */
  readonly via?: Via;
  /**
   * Every operation takes one lease of two resources (drawn at random, in random order, so sets
   * overlap and come in both orders) and increments a counter per resource under it: on PostgreSQL
   * both in one transaction under both fences, on S3, DynamoDB and Azure Blob each under its own
   * resource's fence. `ops`
   * then counts pairs. Through a gateway, the lease of two resources is the gateway's, and each
   * counter is written by a request of its own with its resource's credential.
   */
  readonly pairs?: boolean;
  /** Lease TTL: short, so that pauses longer than it are cheap and stale writers really happen. */
  readonly ttlMs?: number;
  readonly workers?: number;
  /** Resources the workers lock; default 2, with pairs 3 (every pair then overlaps every other). */
  readonly resources?: number;
  readonly redisNodes?: number;
  readonly workMs?: number;
  /** The stores' deadline (timeoutMs) in the workers and the gateway, and the workers' for a lease; default 2 s. */
  readonly deadlineMs?: number;
  /** What liveness allows an answer beyond the deadline; default 1.5 s. */
  readonly livenessMarginMs?: number;
  /** Pause and kill the store server (pause-postgres, kill-postgres, pause-s3, kill-s3, pause-dynamodb, kill-dynamodb; azurite is only paused); default true. */
  readonly storeFaults?: boolean;
  /** Directory for the SVG plots and JSON-lines histories; none written if undefined. */
  readonly out?: string;
  readonly log?: (line: string) => void;
}

export interface RunSummary {
  readonly ops: number;
  readonly byOutcome: Readonly<Record<Outcome, number>>;
  /** Outcome unknown, resolved from the documents read afterwards. */
  readonly outcomeUnknown: { readonly landed: number; readonly notSeen: number };
  readonly failByReason: Readonly<Record<string, number>>;
  /** The classes and codes of the errors that ended operations. */
  readonly errors: Readonly<Record<string, number>>;
  readonly durationMs: number;
  readonly timedOut: boolean;
  /** Worker and gateway processes that died during the run. */
  readonly deaths: readonly string[];
  readonly problems: readonly string[];
  readonly liveness: {
    readonly calls: number;
    readonly late: number;
    readonly unanswered: number;
    readonly boundMs: number;
    /** The slowest answer, stalls the nemesis caused outside the deadline taken off. */
    readonly slowestMs: number;
    readonly slowest: string | undefined;
    /** The slowest answer of each kind of call, in ms, stalls taken off. */
    readonly slowestByStep: Readonly<Record<string, number>>;
    readonly firstLate: string | undefined;
  };
  readonly faults: Readonly<Record<FaultKind, number>>;
  readonly faultsMissed: number;
  readonly violations: Readonly<Record<ViolationKind, number>>;
  /** With pairs: pair operations (each is two of `ops`, one per resource), those written in one transaction, and those atomicity was judged on (a half seen landed). */
  readonly pairs?: { readonly ops: number; readonly atomic: number; readonly judged: number };
  /** Acquisitions that got a token another holder of the resource had already acquired (the wipes cause them). */
  readonly repeatedTokens: number;
  /** Acquisitions that got a token below one acquired earlier on the resource (the wipes cause them too). */
  readonly tokenRegressions: number;
  readonly failedButApplied: number;
  readonly finalCount: number;
  readonly firstViolation?: { readonly kind: ViolationKind; readonly message: string; readonly subHistory: readonly string[] };
}

export interface ChaosSummary {
  readonly seed: number;
  readonly via: Via;
  /** Every operation was a pair of resources under one lease; `ops` counts their halves (one per resource). */
  readonly pairs: boolean;
  readonly opsPerRun: number;
  readonly ttlMs: number;
  readonly workers: number;
  readonly resources: number;
  readonly redisNodes: number;
  readonly workMs: number;
  readonly deadlineMs: number;
  readonly livenessMarginMs: number;
  readonly storeFaults: boolean;
  /** Operations over every configuration and backend. */
  readonly ops: number;
  readonly faults: Readonly<Record<FaultKind, number>>;
  readonly runs: Partial<Record<Backend, Partial<Record<Mode, RunSummary>>>>;
  readonly pass: boolean;
  /** Why the run failed: full showed a violation, unfenced showed none, a run repeated no token, an answer came late or never, a process died, a run timed out or made no progress. */
  readonly failures: readonly string[];
}

/** The backends a run through a gateway (`via: "gateway"`) is set up for (gateway-process.ts). */
export const GATEWAY_BACKENDS: readonly Backend[] = ["postgres", "s3"];

/** Sub-histories can span a long pause; the summary keeps their start and end. */
const SUB_HISTORY_LINES = 24;

function summarize(result: RunResult): RunSummary {
  const c = result.check;
  const first = c.firstViolation;
  let subHistory = first?.subHistory.map(describeEvent) ?? [];
  if (subHistory.length > SUB_HISTORY_LINES) {
    const half = SUB_HISTORY_LINES / 2;
    subHistory = [...subHistory.slice(0, half), `… ${subHistory.length - SUB_HISTORY_LINES} more events …`, ...subHistory.slice(-half)];
  }
  const l = c.liveness;
  return {
    ops: c.ops.total,
    byOutcome: c.ops.byOutcome,
    outcomeUnknown: c.ops.outcomeUnknown,
    failByReason: c.ops.failByReason,
    errors: c.ops.errors,
    durationMs: result.durationMs,
    timedOut: result.timedOut,
    deaths: result.deaths,
    problems: result.problems,
    liveness: {
      calls: l.calls,
      late: l.late,
      unanswered: l.unanswered,
      boundMs: l.deadlineMs + l.marginMs,
      slowestMs: l.slowest === undefined ? 0 : Math.round(l.slowest.ms - l.slowest.stalledMs),
      slowest: l.slowest === undefined ? undefined : describeCall(l.slowest),
      slowestByStep: Object.fromEntries(Object.entries(l.slowestByStep).map(([step, c]) => [step, Math.round(c.ms - c.stalledMs)])),
      firstLate: l.firstLate === undefined ? undefined : describeCall(l.firstLate),
    },
    faults: result.faults,
    faultsMissed: result.faultsMissed,
    violations: c.violations,
    ...(c.pairs.ops === 0 ? {} : { pairs: c.pairs }),
    repeatedTokens: c.repeatedTokens,
    tokenRegressions: c.tokenRegressions,
    failedButApplied: c.failedButApplied,
    finalCount: Object.values(c.final).reduce((sum, f) => sum + f.count, 0),
    ...(first === undefined ? {} : { firstViolation: { kind: first.kind, message: first.message, subHistory } }),
  };
}

const total = (v: Readonly<Record<ViolationKind, number>>): number => VIOLATION_KINDS.reduce((sum, k) => sum + v[k], 0);

/** What makes a chaos run fail: the properties of the three configurations, and progress. */
export function verdict(runs: ChaosSummary["runs"]): string[] {
  const failures: string[] = [];
  for (const [backend, byMode] of Object.entries(runs)) {
    for (const [mode, run] of Object.entries(byMode ?? {})) {
      const where = `${backend}/${mode}`;
      if (run.timedOut) failures.push(`${where}: timed out after ${run.ops} operations`);
      for (const death of run.deaths) failures.push(`${where}: ${death}`);
      for (const problem of run.problems) failures.push(`${where}: ${problem}`);
      if (run.byOutcome.ok === 0) failures.push(`${where}: no operation succeeded`);
      const l = run.liveness;
      if (l.late > 0) failures.push(`${where}: ${l.late} call(s) answered after ${l.boundMs} ms, the first: ${l.firstLate ?? "?"}`);
      if (l.unanswered > 0) failures.push(`${where}: ${l.unanswered} operation(s) never answered`);
      if (mode === "full" && total(run.violations) > 0)
        failures.push(`${where}: ${total(run.violations)} violation(s) ${JSON.stringify(run.violations)}`);
      // Unfenced writes under a lease are expected to break; if they do not, the faults were too gentle to prove anything.
      if (mode === "unfenced" && total(run.violations) === 0)
        failures.push(`${where}: no violation — the nemesis is too gentle to show anything`);
      // Without a repeated token, no store was ever shown two holders with one token: the run proves nothing about equal tokens.
      // With pairs the wipe round may show as the lock going backwards; what the stores make of it the properties judge.
      if (!wipeShown({ repeated: run.repeatedTokens, regressions: run.tokenRegressions }, run.pairs !== undefined))
        failures.push(
          run.pairs === undefined
            ? `${where}: the lock repeated no token — no wipe round took effect`
            : `${where}: the lock neither repeated a token nor went below one it had handed out — no wipe round took effect`,
        );
      // Pairs written in one transaction, none of them seen landed: atomicity was never judged.
      if (run.pairs !== undefined && run.pairs.atomic > 0 && run.pairs.judged === 0)
        failures.push(`${where}: no pair written in one transaction was seen landed — atomicity was never judged`);
    }
  }
  return failures;
}

export async function runChaos(options: ChaosOptions): Promise<ChaosSummary> {
  const log = options.log ?? (() => undefined);
  const pairs = options.pairs ?? false;
  const via = options.via ?? "library";
  const settings = {
    ttlMs: options.ttlMs ?? 600,
    workers: options.workers ?? 5,
    resources: options.resources ?? (pairs ? 3 : 2),
    redisNodes: options.redisNodes ?? 5,
    workMs: options.workMs ?? 2,
    deadlineMs: options.deadlineMs ?? DEFAULT_LIVENESS.deadlineMs,
    livenessMarginMs: options.livenessMarginMs ?? DEFAULT_LIVENESS.marginMs,
    storeFaults: options.storeFaults ?? true,
  };
  if (pairs && settings.resources < 2) throw new RangeError("pairs need at least 2 resources");
  const gatewayless = options.backends.filter((b) => !GATEWAY_BACKENDS.includes(b));
  if (via === "gateway" && gatewayless.length > 0)
    throw new RangeError(`runs through a gateway are on ${GATEWAY_BACKENDS.join(" and ")} only, not ${gatewayless.join(", ")}`);
  if (options.out !== undefined) await mkdir(options.out, { recursive: true });
  const runs: Partial<Record<Backend, Partial<Record<Mode, RunSummary>>>> = {};
  const faults: Record<FaultKind, number> = noFaults();
  let ops = 0;
  for (const backend of options.backends) {
    log(`starting ${backend}`);
    const store = await startStoreServer(backend, { faults: settings.storeFaults });
    try {
      for (const mode of options.configs) {
        const result = await runConfiguration({
          mode,
          store,
          via,
          pairs,
          ops: options.ops,
          seed: options.seed,
          ...settings,
          // Generous: the quick mode takes seconds per configuration; only a hung run gets near this.
          timeoutMs: Math.max(120_000, options.ops * 100),
          log,
        });
        const summary = summarize(result);
        (runs[backend] ??= {})[mode] = summary;
        ops += summary.ops;
        for (const [kind, n] of Object.entries(result.faults) as [FaultKind, number][]) faults[kind] += n;
        if (options.out !== undefined) {
          const name = join(options.out, `${backend}-${mode}${pairs ? "-pairs" : ""}`);
          await writeFile(`${name}.history.jsonl`, historyToJsonLines(result.history));
          await writeFile(
            `${name}.svg`,
            plotHistory(result.history, result.check, {
              title: `${backend} · ${mode}${pairs ? " · pairs" : ""} · via ${via} · seed ${options.seed}`,
              ttlMs: settings.ttlMs,
            }),
          );
        }
      }
    } finally {
      await store.stop();
    }
  }
  const failures = verdict(runs);
  return { seed: options.seed, via, pairs, opsPerRun: options.ops, ...settings, ops, faults, runs, pass: failures.length === 0, failures };
}
