import { InvalidArgumentError } from "@fenced/fence";
import { CorruptStateError, StoreSetupError, StoreUnavailableError } from "@fenced/store";
import type { SweepConfig } from "./config.js";
import { SETUP_FIXES } from "./ops/start-checks.js";
import { enabledBy } from "./settings.js";
import { DriverLoadError, type StoreRegistration, type SweepRequest } from "./stores/registration.js";
import { loadDriver, STORES } from "./stores/registry.js";

/**
 * `fenced-gateway sweep`: each configured store's sweep (stores/registry.ts: S3's deletes what no
 * manifest names under the gateway's bucket and prefix; PostgreSQL, DynamoDB and Azure Blob have
 * nothing to sweep, which their registrations say), with progress on stderr and the report, as one
 * JSON line, on stdout: each store's part under its name.
 */

export interface SweepRun {
  readonly minAgeMs: number;
  readonly dryRun: boolean;
}

/** Where the command writes, and which signals interrupt it: the process's unless a test says otherwise. */
export interface SweepIo {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  readonly signals: readonly NodeJS.Signals[];
}

const PROCESS_IO: SweepIo = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  signals: ["SIGINT", "SIGTERM"],
};

const NAME = "fenced-gateway sweep";

/** Milliseconds from `--min-age`: a whole number of milliseconds, or a number with ms, s, m, h or d (`36h`, `1.5d`). */
export function durationMs(text: string, option: string): number {
  const match = /^([0-9]+(?:\.[0-9]+)?) *(ms|s|m|h|d)?$/.exec(text.trim());
  if (match === null)
    throw new Error(`${option}: ${JSON.stringify(text)} is not a duration (milliseconds, or a number with ms, s, m, h or d, as 36h)`);
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[(match[2] ?? "ms") as "ms"];
  return Math.round(Number(match[1]) * unit);
}

/**
 * Runs the sweep and answers the exit code: 0 swept (or nothing to sweep, which loads no driver), 2 a
 * configuration that cannot be swept (no store, options a store refuses), 1 a backend that failed
 * the sweep or a signal that interrupted it — each with one line on stderr.
 */
export async function sweepCommand(config: SweepConfig, run: SweepRun, io: SweepIo = PROCESS_IO): Promise<number> {
  const line = (text: string): void => io.stderr(`${NAME}: ${text}\n`);
  const sections: Readonly<Record<string, unknown>> = config;
  const configured = STORES.filter((store) => sections[store.name] !== undefined);
  if (configured.length === 0) {
    const where = STORES.filter((store) => store.nothingToSweep === undefined).map((store) => {
      const e = enabledBy(store);
      return `the ${store.title} ${e.what} (${e.flag}, ${e.variable} or ${store.name}.${e.field}) the gateway writes ${store.family} to`;
    });
    line(`no store is configured: give ${where.join(", or ")}`);
    return 2;
  }
  const report: Record<string, object> = {};
  for (const store of configured) {
    try {
      report[store.name] = await interruptible(io, (signal) =>
        sweepOne(store, sections[store.name], { ...run, signal, storeTimeoutMs: config.storeTimeoutMs, line }),
      );
    } catch (err) {
      const failure = failureLine(store, err);
      if (failure === undefined) throw err;
      line(failure.line);
      return failure.code;
    }
  }
  io.stdout(`${JSON.stringify(report)}\n`);
  return 0;
}

/** One store's part: what its registration says when nothing is ever left behind, else its driver's sweep. */
async function sweepOne(store: StoreRegistration, section: unknown, request: SweepRequest): Promise<object> {
  const why = store.nothingToSweep;
  if (why !== undefined) {
    request.line(`${store.title}: ${why}`);
    return { swept: false, why };
  }
  const driver = await loadDriver(store);
  if (driver.sweep === undefined) throw new Error(`${store.title} says it sweeps, and its driver has no sweep`);
  return driver.sweep(section, request);
}

/** The sweep with a signal that SIGINT or SIGTERM aborts: an interrupted sweep throws Interrupted. */
async function interruptible<T>(io: SweepIo, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController();
  const stop = (signal: NodeJS.Signals): void => controller.abort(new Interrupted(signal));
  for (const signal of io.signals) process.once(signal, stop);
  try {
    return await work(controller.signal);
  } finally {
    for (const signal of io.signals) process.off(signal, stop);
  }
}

class Interrupted extends Error {
  override readonly name = "Interrupted";
  constructor(readonly signal: NodeJS.Signals) {
    super(`interrupted by ${signal}`);
  }
}

const AGAIN = "what it deleted stays deleted, and a sweep run again finds what is left";

/** A typed failure as one line and its exit code; undefined for anything else (a failure of the gateway's own). */
function failureLine(store: StoreRegistration, err: unknown): { line: string; code: number } | undefined {
  const { title } = store;
  if (err instanceof Interrupted) return { line: `${err.message}: ${AGAIN}`, code: 1 };
  if (err instanceof DriverLoadError) return { line: err.message, code: 1 };
  // The store checks its options (the bucket's name, --min-age's range) before any I/O.
  if (err instanceof InvalidArgumentError) return { line: `invalid configuration: ${err.message}`, code: 2 };
  if (err instanceof StoreSetupError)
    return { line: `${err.backend} is not set up (${err.problem}): ${SETUP_FIXES[err.problem]}`, code: 1 };
  if (err instanceof StoreUnavailableError) return { line: `${title} could not serve the sweep (${err.reason}): ${AGAIN}`, code: 1 };
  if (err instanceof CorruptStateError)
    return {
      line: `${title} holds a ${err.what} the store did not write (${JSON.stringify(err.subject)}): the sweep judges nothing against it; repair or remove it, then sweep again`,
      code: 1,
    };
  // The backend's own answer (AccessDenied …), or its client's failure: what backendFailure reads for a request.
  const code = store.backendCode(err);
  if (code !== undefined) return { line: `${title} refused the sweep (${code}): ${store.backendFix(code, "sweep")}`, code: 1 };
  return undefined;
}
