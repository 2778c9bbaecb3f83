import { checkResourceFenceOption, integerIn, prefixOption } from "../cas/options.js";
import type { CasOptions } from "../cas/io.js";
import { optionsObject, timeoutOption } from "../options.js";

export interface FencedAzureBlobOptions {
  /**
   * Prefix of every blob the store writes in the container; default "fenced/". Empty, or ending in
   * "/". The store owns everything under it, and nothing else may write there.
   */
  readonly prefix?: string | undefined;
  /**
   * The largest body put() takes, in bytes (default 16 MiB; at most 256 MiB). Every body is kept in
   * its key's manifest blob, written whole by one request and held in memory: a body over it, or a
   * stream that runs past it, is refused with InvalidArgumentError and nothing is written.
   */
  readonly maxBodyBytes?: number | undefined;
  /**
   * Whether writes also read (and raise) the resource's fence blob, right before each manifest
   * write, so that a token refused by register() is refused on every key. Default true.
   */
  readonly checkResourceFence?: boolean | undefined;
  /** Conditional-write rounds per write before giving up (ContentionError). Default 64. */
  readonly maxAttempts?: number | undefined;
  /**
   * How long one call may wait for Azure, in milliseconds (default 5,000; 100 to 600,000): the call
   * settles by then with its result, StoreUnavailableError ("timeout": nothing was applied) or
   * OutcomeUnknownError (a manifest write was sent and its answer did not come in time).
   */
  readonly timeoutMs?: number | undefined;
}

export interface ResolvedOptions extends CasOptions {
  readonly maxBodyBytes: number;
}

const MiB = 1024 * 1024;

export function validateOptions(options: unknown): ResolvedOptions {
  const o = options === undefined ? {} : optionsObject(options, "{ prefix?, maxBodyBytes?, ... }");
  return {
    prefix: prefixOption(o.prefix),
    maxBodyBytes: integerIn("maxBodyBytes", o.maxBodyBytes, 0, 256 * MiB, 16 * MiB),
    checkResourceFence: checkResourceFenceOption(o.checkResourceFence),
    maxAttempts: integerIn("maxAttempts", o.maxAttempts, 1, 10_000, 64),
    timeoutMs: timeoutOption(o.timeoutMs, "timeoutMs"),
  };
}
