import { InvalidArgumentError } from "@fenced/fence";
import { OBJECT_VERSION } from "../versions.js";
import { assertKey } from "../fence.js";
import type { CheckedFence } from "@fenced/fence/internal";
import { checkSignal, optionsObject, refuseAborted, signalOnly, transferFences } from "../options.js";

/** The options every store of the algorithm takes, and the call options its calls share, checked before any I/O. */

export function integerIn(name: string, value: unknown, min: number, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value)) throw new InvalidArgumentError(name, "must be an integer");
  if (value < min || value > max) throw new InvalidArgumentError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

/** The prefix every record of the store is named under (layout.ts); default "fenced/". Empty, or ending in "/". */
export function prefixOption(value: unknown): string {
  const prefix = value ?? "fenced/";
  if (typeof prefix !== "string") throw new InvalidArgumentError("prefix", "must be a string");
  if (prefix !== "") {
    if (!prefix.endsWith("/")) throw new InvalidArgumentError("prefix", 'must be empty or end with "/"');
    if (Buffer.byteLength(prefix) > 256) throw new InvalidArgumentError("prefix", "must be at most 256 bytes");
    // Same rules as keys, so the store's records never land outside the prefix.
    assertKey(prefix.slice(0, -1), "prefix");
  }
  return prefix;
}

export function checkResourceFenceOption(value: unknown): boolean {
  if (value !== undefined && typeof value !== "boolean") throw new InvalidArgumentError("checkResourceFence", "must be a boolean");
  return value ?? true;
}

export function checkVersion(ifVersion: unknown): string | undefined {
  if (ifVersion === undefined) return undefined;
  if (typeof ifVersion !== "string")
    throw new InvalidArgumentError("options.ifVersion", `must be a string (a version returned by put/get/delete), got ${typeof ifVersion}`);
  if (!OBJECT_VERSION.test(ifVersion))
    throw new InvalidArgumentError("options.ifVersion", `${JSON.stringify(ifVersion)} is not a version this store issues`);
  return ifVersion;
}

/** Checks a signal; one aborted already throws its reason before any I/O. */
export function liveSignal(signal: unknown): AbortSignal | undefined {
  const checked = checkSignal(signal);
  refuseAborted(checked);
  return checked;
}

export interface CheckedTransferOptions {
  readonly from: CheckedFence;
  readonly to: CheckedFence;
  readonly ifVersion: string | undefined;
  readonly signal: AbortSignal | undefined;
}

export function transferOptions(options: unknown): CheckedTransferOptions {
  const { from, to, ifVersion, signal } = optionsObject(options, "{ from, to, ifVersion?, signal? }");
  return { ...transferFences(from, to), ifVersion: checkVersion(ifVersion), signal: liveSignal(signal) };
}

/** The `{ signal? }` of register(), fence(), get() and getBytes(). */
export function signalOptions(options: unknown): { readonly signal: AbortSignal | undefined } {
  return { signal: liveSignal(signalOnly(options)) };
}
