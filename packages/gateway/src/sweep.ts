import { InvalidArgumentError } from "@fenced/fence";
import { CorruptStateError, StoreSetupError, StoreUnavailableError } from "@fenced/store";
import { FencedS3 } from "@fenced/store/s3";
import { type S3SweepProgress, type S3SweepReport } from "@fenced/store/internal";
import { s3Backend } from "./cli-backends.js";
import type { SweepConfig } from "./config.js";
import { backendFailure } from "./problems/backend-errors.js";

/**
 * `fenced-gateway sweep`: FencedS3.sweep() over the gateway's bucket and prefix, with progress on
 * stderr and the report, as one JSON line, on stdout. PostgreSQL has nothing to sweep (POSTGRES).
 */

/** Why PostgreSQL has nothing to sweep: what the report and stderr say. */
const POSTGRES =
  "nothing to sweep: a record and its resource's fence row change only inside one transaction, so no write, " +
  "failed or abandoned, leaves anything behind; tombstones and fence rows stay by design (they keep each key's owner " +
  "and each resource's highest token)";

export interface SweepRun {
  readonly minAgeMs: number;
  readonly dryRun: boolean;
}

/** The report on stdout. */
interface SweepReport {
  readonly s3?: S3SweepReport & { readonly bucket: string; readonly prefix: string };
  readonly postgres?: { readonly swept: false; readonly why: string };
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
 * Runs the sweep and answers the exit code: 0 swept (or nothing to sweep: PostgreSQL only), 2 a
 * configuration that cannot be swept (no store, options a store refuses), 1 a backend that failed
 * the sweep or a signal that interrupted it — each with one line on stderr.
 */
export async function sweepCommand(config: SweepConfig, run: SweepRun, io: SweepIo = PROCESS_IO): Promise<number> {
  const line = (text: string): void => io.stderr(`${NAME}: ${text}\n`);
  if (config.s3 === undefined && config.postgres === undefined) {
    line("no store is configured: give the S3 bucket (--s3-bucket, FENCED_GATEWAY_S3_BUCKET or s3.bucket) the gateway writes objects to");
    return 2;
  }
  const report: { -readonly [K in keyof SweepReport]: SweepReport[K] } = {};
  if (config.postgres !== undefined) {
    line(`PostgreSQL: ${POSTGRES}`);
    report.postgres = { swept: false, why: POSTGRES };
  }
  if (config.s3 !== undefined) {
    const { client, ...options } = s3Backend(config.s3);
    try {
      const store = new FencedS3(client, { ...options, timeoutMs: config.storeTimeoutMs });
      const s3 = await interruptible(io, (signal) =>
        store.sweep({ minAgeMs: run.minAgeMs, dryRun: run.dryRun, signal, onProgress: progressLines(line) }),
      );
      line(`S3: done: ${summary(s3)}`);
      report.s3 = { bucket: store.bucket, prefix: store.prefix, ...s3 };
    } catch (err) {
      const failure = failureLine(err);
      if (failure === undefined) throw err;
      line(failure.line);
      return failure.code;
    } finally {
      client.destroy();
    }
  }
  io.stdout(`${JSON.stringify(report)}\n`);
  return 0;
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

/** One stderr line when a phase begins and then at most one a second: a large bucket has thousands of pages. */
function progressLines(line: (text: string) => void): (progress: S3SweepProgress) => void {
  let phase: string | undefined;
  let last = 0;
  return (progress) => {
    const now = Date.now();
    if (progress.phase === phase && now - last < 1_000) return;
    phase = progress.phase;
    last = now;
    line(`S3: ${progress.phase}: ${progress.pages} page${progress.pages === 1 ? "" : "s"}, ${summary(progress)}`);
  };
}

function summary(r: S3SweepReport): string {
  const gone = r.dryRun ? "would delete" : "deleted";
  const aborted = r.dryRun ? "would abort" : "aborted";
  const kept = r.uploads.kept;
  return (
    `${r.scanned.objects} objects scanned (${bytes(r.scanned.bytes)}), ${gone} ${r.deleted.objects} (${bytes(r.deleted.bytes)}), ` +
    `kept ${r.kept.objects} (named ${r.keptBecause.named.objects}, younger than ${r.minAgeMs} ms ${r.keptBecause.young.objects}, ` +
    `unrecognised ${r.keptBecause.unrecognised.objects}); multipart uploads: ${r.uploads.scanned} found, ${aborted} ${r.uploads.aborted}, ` +
    `kept (named ${kept.named}, younger ${kept.young}, unrecognised ${kept.unrecognised})`
  );
}

function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${n} B` : `${value.toFixed(1)} ${units[unit] ?? ""}`;
}

const AGAIN = "what it deleted stays deleted, and a sweep run again finds what is left";

/** A typed failure as one line and its exit code; undefined for anything else (a failure of the gateway's own). */
function failureLine(err: unknown): { line: string; code: number } | undefined {
  if (err instanceof Interrupted) return { line: `${err.message}: ${AGAIN}`, code: 1 };
  // The store checks its options (the bucket's name, --min-age's range) before any I/O.
  if (err instanceof InvalidArgumentError) return { line: `invalid configuration: ${err.message}`, code: 2 };
  if (err instanceof StoreSetupError)
    return { line: `${err.backend} is not set up (${err.problem}): check the bucket's name, or create it`, code: 1 };
  if (err instanceof StoreUnavailableError) return { line: `S3 could not serve the sweep (${err.reason}): ${AGAIN}`, code: 1 };
  if (err instanceof CorruptStateError)
    return {
      line: `S3 holds a ${err.what} the store did not write (${JSON.stringify(err.subject)}): the sweep judges nothing against it; repair or remove it, then sweep again`,
      code: 1,
    };
  const refused = backendFailure("objects", "sweep", err);
  if (refused !== undefined)
    return {
      line: `S3 refused the sweep (${refused.code}): check the endpoint, the credentials and that they may list, read and delete objects and abort multipart uploads in the bucket`,
      code: 1,
    };
  return undefined;
}
