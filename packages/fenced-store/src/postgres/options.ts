import { InvalidArgumentError, MAX_TOKEN, type CheckedFence } from "@fenced/fence";
import { RECORD_VERSION } from "../versions.js";
import { checkSignal, liveFence, optionsObject, transferFences } from "../options.js";

/**
 * The checks FencedPostgres makes on its arguments before any I/O. Each reads every field once and
 * returns copies, so a caller that mutates its objects (or a getter that changes its answer) during
 * the call cannot show the check one value and the database another.
 */

// Versions are decimal renderings of a positive bigint sequence value; anything else was not issued by us.

export function assertVersion(version: unknown, argument: string): asserts version is string {
  if (typeof version !== "string")
    throw new InvalidArgumentError(
      argument,
      `must be a string (a version returned by put/get/transfer), got ${version === null ? "null" : typeof version}`,
    );
  if (!RECORD_VERSION.test(version) || BigInt(version) > MAX_TOKEN)
    throw new InvalidArgumentError(argument, `${JSON.stringify(version)} is not a version this store issues`);
}

export interface CheckedWrite {
  readonly fence: CheckedFence;
  readonly ifVersion: string | undefined;
  readonly signal: AbortSignal | undefined;
}

export function writeOptions(options: unknown): CheckedWrite {
  const { fence, ifVersion, signal } = optionsObject(options, "{ fence, ifVersion?, signal? }");
  const checked = liveFence(fence, "options.fence");
  if (ifVersion !== undefined) assertVersion(ifVersion, "options.ifVersion");
  return { fence: checked, ifVersion, signal: checkSignal(signal) };
}

export interface CheckedTransfer {
  readonly from: CheckedFence;
  readonly to: CheckedFence;
  readonly ifVersion: string | undefined;
  readonly signal: AbortSignal | undefined;
}

export function transferOptions(options: unknown): CheckedTransfer {
  const { from, to, ifVersion, signal } = optionsObject(options, "{ from, to, ifVersion?, signal? }");
  // Two different resources: within one there is nothing to move, and one statement cannot lock one fence row twice.
  const fences = transferFences(from, to);
  if (ifVersion !== undefined) assertVersion(ifVersion, "options.ifVersion");
  return { ...fences, ifVersion, signal: checkSignal(signal) };
}

export function assertPool(pool: unknown): void {
  const p = pool as { query?: unknown; connect?: unknown } | null;
  if (typeof p !== "object" || p === null || typeof p.query !== "function" || typeof p.connect !== "function") {
    throw new InvalidArgumentError("pool", "must be a pg.Pool (an object with query() and connect())");
  }
}

/** Default deadline of every store call, waiting for a pool client included. */
export const DEFAULT_TIMEOUT_MS = 5_000;
export const MIN_TIMEOUT_MS = 100;
export const MAX_TIMEOUT_MS = 600_000;

/** The constructor's `timeoutMs`: whole milliseconds within [100, 600000]; DEFAULT_TIMEOUT_MS when absent. */
export function timeoutOption(timeoutMs: unknown): number {
  if (timeoutMs === undefined) return DEFAULT_TIMEOUT_MS;
  if (typeof timeoutMs !== "number" || !Number.isInteger(timeoutMs) || timeoutMs < MIN_TIMEOUT_MS || timeoutMs > MAX_TIMEOUT_MS)
    throw new InvalidArgumentError(
      "options.timeoutMs",
      `must be an integer number of milliseconds from ${MIN_TIMEOUT_MS} to ${MAX_TIMEOUT_MS}, got ${typeof timeoutMs === "number" ? String(timeoutMs) : typeof timeoutMs}`,
    );
  return timeoutMs;
}
