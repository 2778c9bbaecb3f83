import { InvalidArgumentError, type Fence } from "@fenced/fence";
import type { ObjectWriteOptions, SignalOptions } from "../contract.js";
import { type CheckedFence } from "@fenced/fence/internal";
import { checkResourceFenceOption, checkVersion, integerIn, liveSignal, prefixOption } from "../cas/options.js";
import { liveFence, milliseconds, optionsObject, timeoutOption } from "../options.js";

export interface FencedS3Options {
  readonly bucket: string;
  /**
   * Prefix of every object the store writes; default "fenced/". Empty, or ending in "/". The store
   * owns everything under it, and nothing else may write there: two stores in one bucket need
   * prefixes neither of which is a prefix of the other ("" owns the whole bucket). Nested prefixes
   * are unsupported: either store's sweep() may delete the other's current bodies.
   */
  readonly prefix?: string | undefined;
  /**
   * Bodies in memory up to this many bytes are stored inside the manifest: one PUT per write and one
   * GET per read. Larger bodies and all streams go to their own data object. Default 64 KiB; 0 = never.
   */
  readonly inlineLimit?: number | undefined;
  /**
   * Whether writes also read (and raise) the resource's fence object, right before each manifest PUT,
   * so that a token refused by register() is refused on every key. Default true. False leaves the
   * per-object ratchet only, and saves one GET per write. See PROTOCOL.md, "S3".
   */
  readonly checkResourceFence?: boolean | undefined;
  /** Conditional-write rounds per write, and read-modify-write rounds per update(), before giving up. Default 64. */
  readonly maxAttempts?: number | undefined;
  /** Multipart part size for streams of unknown length (memory held: 3 parts). Default 8 MiB, minimum 5 MiB. */
  readonly partSize?: number | undefined;
  /**
   * How long one call may wait for the backend, in milliseconds (default 5,000; 100 to 600,000). Every
   * call settles within about this long from its start: with its result, or StoreUnavailableError
   * ("timeout": nothing was applied) or OutcomeUnknownError (a manifest PUT was sent and its answer
   * did not come in time: read the key back). Time spent waiting for the caller — a stream body
   * producing its bytes, update()'s function — is not counted. get()'s body stream then errors with
   * StoreUnavailableError if no byte of it arrives for this long while it is being read. Requests no
   * call waits for (the deletion of replaced bodies) are bounded by it too, each on its own.
   */
  readonly timeoutMs?: number | undefined;
}

/** put(): the objects family's options (../contract.ts); a stream's contentLength makes one streamed PUT instead of a multipart upload. */
export type S3WriteOptions = ObjectWriteOptions;

export interface S3UpdateOptions extends SignalOptions {
  readonly fence: Fence;
  /** Default: the content type of the version read. */
  readonly contentType?: string | undefined;
  /** Read-modify-write rounds before giving up; default the store's maxAttempts. */
  readonly maxAttempts?: number | undefined;
}

export interface ResolvedOptions {
  readonly bucket: string;
  readonly prefix: string;
  readonly inlineLimit: number;
  readonly checkResourceFence: boolean;
  readonly maxAttempts: number;
  readonly partSize: number;
  readonly timeoutMs: number;
}

const MiB = 1024 * 1024;

export function validateOptions(options: unknown): ResolvedOptions {
  const o = optionsObject(options, "{ bucket, prefix? }");
  if (typeof o.bucket !== "string") throw new InvalidArgumentError("bucket", "must be a string");
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(o.bucket))
    throw new InvalidArgumentError("bucket", `${JSON.stringify(o.bucket)} is not a valid S3 bucket name`);
  const prefix = prefixOption(o.prefix);
  return {
    bucket: o.bucket,
    prefix,
    inlineLimit: integerIn("inlineLimit", o.inlineLimit, 0, 4 * MiB, 64 * 1024),
    checkResourceFence: checkResourceFenceOption(o.checkResourceFence),
    maxAttempts: integerIn("maxAttempts", o.maxAttempts, 1, 10_000, 64),
    partSize: integerIn("partSize", o.partSize, 5 * MiB, 5 * 1024 * MiB, 8 * MiB),
    timeoutMs: timeoutOption(o.timeoutMs, "timeoutMs"),
  };
}

export interface CheckedWriteOptions {
  readonly fence: CheckedFence;
  readonly ifVersion: string | undefined;
  readonly contentType: unknown;
  readonly contentLength: unknown;
  readonly maxAttempts: number | undefined;
  readonly signal: AbortSignal | undefined;
}

/** Checks the common options before any I/O; copies the fence, so a caller mutating it mid-write changes nothing. */
export function writeOptions(options: unknown): CheckedWriteOptions {
  const { fence, ifVersion, contentType, contentLength, maxAttempts, signal } = optionsObject(options, "{ fence, ... }");
  const checked = liveFence(fence, "options.fence");
  return {
    fence: checked,
    ifVersion: checkVersion(ifVersion),
    contentType,
    contentLength,
    maxAttempts: maxAttempts === undefined ? undefined : integerIn("options.maxAttempts", maxAttempts, 1, 10_000, 1),
    signal: liveSignal(signal),
  };
}

export interface CheckedSweepOptions<P> {
  readonly minAgeMs: number;
  readonly dryRun: boolean;
  readonly signal: AbortSignal | undefined;
  readonly concurrency: number;
  readonly pageSize: number;
  readonly onProgress: ((progress: P) => void) | undefined;
}

const DAY_MS = 86_400_000;

export function sweepOptions<P>(options: unknown): CheckedSweepOptions<P> {
  const o = options === undefined ? {} : optionsObject(options, "{ minAgeMs?, dryRun?, signal?, concurrency?, pageSize?, onProgress? }");
  const { minAgeMs, dryRun, signal, concurrency, pageSize, onProgress } = o;
  if (dryRun !== undefined && typeof dryRun !== "boolean") throw new InvalidArgumentError("options.dryRun", "must be a boolean");
  if (onProgress !== undefined && typeof onProgress !== "function")
    throw new InvalidArgumentError("options.onProgress", "must be a function (progress) => void");
  return {
    minAgeMs: milliseconds("options.minAgeMs", minAgeMs, 0, 3650 * DAY_MS, DAY_MS),
    dryRun: dryRun ?? false,
    concurrency: integerIn("options.concurrency", concurrency, 1, 64, 8),
    pageSize: integerIn("options.pageSize", pageSize, 1, 1000, 1000),
    onProgress: onProgress as ((progress: P) => void) | undefined,
    signal: liveSignal(signal),
  };
}
