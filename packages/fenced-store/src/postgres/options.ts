import { assertKey, assertResource, InvalidArgumentError, MAX_TOKEN } from "@fenced/fence";
import { type CheckedFence } from "@fenced/fence/internal";
import { assertJsonValue } from "../json.js";
import { RECORD_VERSION } from "../versions.js";
import { checkSignal, liveFence, liveFences, optionsObject, transferFences } from "../options.js";

/**
 * The checks FencedPostgres makes on its arguments before any I/O. Each reads every field once and
 * returns copies, so a caller that mutates its objects (or a getter that changes its answer) during
 * the call cannot show the check one value and the database another.
 */

// Versions are decimal renderings of a positive bigint sequence value; anything else was not issued by us.

function assertVersion(version: unknown, argument: string): asserts version is string {
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

/** At most this many records in one putAll(): each is a statement of its own, its row locked until COMMIT. */
export const MAX_PUT_ALL = 256;

/** One write of putAll(), checked and copied: its value already JSON text, its fence the one its resource names. */
export interface CheckedPutAllWrite {
  readonly key: string;
  readonly json: string;
  readonly fence: CheckedFence;
  readonly ifVersion: string | undefined;
}

export interface CheckedPutAll {
  readonly writes: readonly CheckedPutAllWrite[];
  readonly fences: readonly CheckedFence[];
  readonly signal: AbortSignal | undefined;
}

/**
 * putAll()'s arguments: a non-empty array of at most MAX_PUT_ALL writes `{ key, value, resource?,
 * ifVersion? }`, no key twice; `options.fences` an array of fences or a lease (liveFences). Each
 * write names the resource whose fence it is under; it may leave it out only when there is one fence.
 */
export function putAllOptions(writes: unknown, options: unknown): CheckedPutAll {
  const { fences, signal } = optionsObject(options, "{ fences, signal? }");
  const checked = liveFences(fences, "options.fences");
  const byResource = new Map(checked.map((f) => [f.resource, f]));
  if (!Array.isArray(writes)) throw new InvalidArgumentError("writes", "must be an array of { key, value, resource?, ifVersion? }");
  if (writes.length === 0) throw new InvalidArgumentError("writes", "must hold at least one write");
  if (writes.length > MAX_PUT_ALL)
    throw new InvalidArgumentError("writes", `must hold at most ${MAX_PUT_ALL} writes, got ${writes.length}`);
  const keys = new Set<string>();
  const out: CheckedPutAllWrite[] = [];
  for (const [i, write] of (writes as unknown[]).entries()) {
    const at = `writes[${i}]`;
    const { key, value, resource, ifVersion } = optionsObject(write, "{ key, value, resource?, ifVersion? }", at);
    assertKey(key, `${at}.key`);
    // One row per key: a second write of it in one statement sequence would overwrite the first.
    if (keys.has(key)) throw new InvalidArgumentError(`${at}.key`, `repeats ${JSON.stringify(key)}: one write per key`);
    keys.add(key);
    assertJsonValue(value, `${at}.value`);
    out.push({
      key,
      json: JSON.stringify(value),
      fence: fenceOf(resource, checked, byResource, at),
      ifVersion: checkedVersion(ifVersion, at),
    });
  }
  return { writes: out, fences: checked, signal: checkSignal(signal) };
}

/** The fence a write of putAll() is under: the one of the resource it names, or the only one. */
function fenceOf(
  resource: unknown,
  fences: readonly CheckedFence[],
  byResource: ReadonlyMap<string, CheckedFence>,
  at: string,
): CheckedFence {
  if (resource === undefined) {
    const [only, ...more] = fences;
    if (only === undefined || more.length > 0)
      throw new InvalidArgumentError(`${at}.resource`, `must name the resource the write is under: there are ${fences.length} fences`);
    return only;
  }
  assertResource(resource, `${at}.resource`);
  const fence = byResource.get(resource);
  if (fence === undefined) throw new InvalidArgumentError(`${at}.resource`, `${JSON.stringify(resource)} is not among options.fences`);
  return fence;
}

function checkedVersion(ifVersion: unknown, at: string): string | undefined {
  if (ifVersion === undefined) return undefined;
  assertVersion(ifVersion, `${at}.ifVersion`);
  return ifVersion;
}

export function assertPool(pool: unknown): void {
  const p = pool as { query?: unknown; connect?: unknown } | null;
  if (typeof p !== "object" || p === null || typeof p.query !== "function" || typeof p.connect !== "function") {
    throw new InvalidArgumentError("pool", "must be a pg.Pool (an object with query() and connect())");
  }
}
