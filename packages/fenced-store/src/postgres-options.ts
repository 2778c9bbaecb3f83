import { checkFence, InvalidArgumentError, MAX_TOKEN, type CheckedFence } from "@fenced/fence";

/**
 * The checks FencedPostgres makes on its arguments before any I/O. Each reads every field once and
 * returns copies, so a caller that mutates its objects (or a getter that changes its answer) during
 * the call cannot show the check one value and the database another.
 */

// Versions are decimal renderings of a positive bigint sequence value; anything else was not issued by us.
const VERSION = /^[1-9][0-9]{0,18}$/;

export function assertVersion(version: unknown, argument: string): asserts version is string {
  if (typeof version !== "string") throw new InvalidArgumentError(argument, `must be a string (a version returned by put/get/transfer), got ${version === null ? "null" : typeof version}`);
  if (!VERSION.test(version) || BigInt(version) > MAX_TOKEN) throw new InvalidArgumentError(argument, `${JSON.stringify(version)} is not a version this store issues`);
}

/** Anything with AbortSignal's shape: an `aborted` flag and a `reason` (a polyfill or another realm's signal passes). */
function checkSignal(signal: unknown, argument: string): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  if (typeof signal !== "object" || signal === null || typeof (signal as { aborted?: unknown }).aborted !== "boolean" || typeof (signal as { addEventListener?: unknown }).addEventListener !== "function") {
    throw new InvalidArgumentError(argument, "must be an AbortSignal");
  }
  return signal as AbortSignal;
}

/** Throws the signal's reason if it has been aborted: the check made before each statement is sent. */
export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted === true) throw signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

function object(options: unknown, argument: string, shape: string): Record<string, unknown> {
  if (typeof options !== "object" || options === null) throw new InvalidArgumentError(argument, `must be an object ${shape}`);
  return options as Record<string, unknown>;
}

export interface CheckedWrite {
  readonly fence: CheckedFence;
  readonly ifVersion: string | undefined;
  readonly signal: AbortSignal | undefined;
}

export function writeOptions(options: unknown): CheckedWrite {
  const { fence, ifVersion, signal } = object(options, "options", "{ fence, ifVersion?, signal? }");
  const checked = checkFence(fence, "options.fence");
  if (ifVersion !== undefined) assertVersion(ifVersion, "options.ifVersion");
  return { fence: checked, ifVersion, signal: checkSignal(signal, "options.signal") };
}

export interface CheckedTransfer {
  readonly from: CheckedFence;
  readonly to: CheckedFence;
  readonly ifVersion: string | undefined;
  readonly signal: AbortSignal | undefined;
}

export function transferOptions(options: unknown): CheckedTransfer {
  const { from, to, ifVersion, signal } = object(options, "options", "{ from, to, ifVersion?, signal? }");
  const source = checkFence(from, "options.from");
  const target = checkFence(to, "options.to");
  // Within one resource there is nothing to move, and one statement cannot lock one fence row twice.
  if (source.resource === target.resource) throw new InvalidArgumentError("options.to.resource", "must differ from options.from.resource");
  if (ifVersion !== undefined) assertVersion(ifVersion, "options.ifVersion");
  return { from: source, to: target, ifVersion, signal: checkSignal(signal, "options.signal") };
}

/** The optional `{ signal? }` of register() and transaction(). */
export function signalOptions(options: unknown): AbortSignal | undefined {
  if (options === undefined) return undefined;
  const { signal } = object(options, "options", "{ signal? }");
  return checkSignal(signal, "options.signal");
}

export function assertPool(pool: unknown): void {
  const p = pool as { query?: unknown; connect?: unknown } | null;
  if (typeof p !== "object" || p === null || typeof p.query !== "function" || typeof p.connect !== "function") {
    throw new InvalidArgumentError("pool", "must be a pg.Pool (an object with query() and connect())");
  }
}
