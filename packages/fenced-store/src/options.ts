import { checkFence, InvalidArgumentError, refuseEndedLease, type CheckedFence } from "@fenced/fence";

/**
 * The argument checks both backends share, one definition each. Each reads every field once and
 * returns copies, so a caller that mutates its objects (or a getter that changes its answer) during
 * the call cannot show the check one value and the storage another. Argument names are given as the
 * caller wrote them: `options.fence.token`, `options.signal`.
 */

/** The options object itself; InvalidArgumentError naming the expected shape otherwise. */
export function optionsObject(options: unknown, shape: string, argument = "options"): Record<string, unknown> {
  if (typeof options !== "object" || options === null) throw new InvalidArgumentError(argument, `must be an object ${shape}`);
  return options as Record<string, unknown>;
}

/**
 * A fence checked and copied (checkFence), and refused with its own error if it knows its lease
 * ended (refuseEndedLease: a released or expired Lease), whether or not a signal was passed too.
 * Every operation that takes a fence reads it through here, before any I/O.
 */
export function liveFence(fence: unknown, argument = "fence"): CheckedFence {
  const checked = checkFence(fence, argument);
  refuseEndedLease(fence);
  return checked;
}

/** Anything with AbortSignal's shape: an `aborted` flag and `addEventListener` (a polyfill or another realm's signal passes). */
export function checkSignal(signal: unknown, argument = "options.signal"): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  const s: { aborted?: unknown; addEventListener?: unknown } | null = typeof signal === "object" ? signal : null;
  if (s === null || typeof s.aborted !== "boolean" || typeof s.addEventListener !== "function") {
    throw new InvalidArgumentError(argument, "must be an AbortSignal");
  }
  return signal as AbortSignal;
}

/** Throws the signal's reason if it has been aborted: checked before each request or statement is sent. */
export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted === true) throw signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

/** The optional `{ signal? }` of register() and transaction(). */
export function signalOnly(options: unknown): AbortSignal | undefined {
  if (options === undefined) return undefined;
  return checkSignal(optionsObject(options, "{ signal? }").signal);
}

export interface CheckedTransferFences {
  readonly from: CheckedFence;
  readonly to: CheckedFence;
}

/** transfer()'s two fences: both valid, naming two different resources (within one there is nothing to move). */
export function transferFences(from: unknown, to: unknown): CheckedTransferFences {
  const source = liveFence(from, "options.from");
  const target = liveFence(to, "options.to");
  if (source.resource === target.resource)
    throw new InvalidArgumentError("options.to.resource", "must differ from options.from.resource: a key already belongs to its owner");
  return { from: source, to: target };
}
