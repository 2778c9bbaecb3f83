import { assertResource, assertToken, InvalidArgumentError } from "@fenced/fence";
import { checkResources } from "@fenced/fence/internal";
import type { HeldFence, NodeFailure } from "./errors.js";

/**
 * The lock's inputs and their checks. Every check throws InvalidArgumentError before any Redis
 * command is sent; a resource is valid exactly when @fenced/fence says so, so the lock never grants
 * a lease that the stores would refuse.
 */

export interface RedlockOptions {
  /** Clock drift allowance as a fraction of the TTL (plus 2 ms); subtracted from the validity. In [0, 1). Default 0.01. */
  readonly driftFactor?: number | undefined;
  /** Retries after the first attempt (an integer, or Infinity: retry until `signal` aborts). Default 10. */
  readonly retryCount?: number | undefined;
  /** Base delay between attempts. Default 200 ms. */
  readonly retryDelayMs?: number | undefined;
  /** Random extra delay in [0, retryJitterMs) so that contenders spread out. Default 100 ms. */
  readonly retryJitterMs?: number | undefined;
  /** How long one node may take to answer before it counts as failed for that round. Default 200 ms. */
  readonly nodeTimeoutMs?: number | undefined;
  /**
   * using(): extend when this much validity remains. Must be below the longest validity a lease of
   * the call's TTL can have (TTL minus the drift allowance), or using() refuses the call: there would
   * be no time left to wait between extensions. Default: half of that longest validity.
   */
  readonly automaticExtensionThresholdMs?: number | undefined;
  /** using(): extension rounds tried before the lease is declared lost. Default 3. */
  readonly extensionAttempts?: number | undefined;
  /**
   * Called with each node's result in every round the lock sends (acquire, publish, extend, release):
   * that it answered, or why it did not count (`refused`, `timeout`, `error`), and how long that took
   * — for per-node metrics. A node not sent the call (the round's outcome was known first) is not
   * reported. Called synchronously; what it throws is ignored. Default: none (nothing is timed).
   */
  readonly onNodeResult?: ((result: NodeResult) => void) | undefined;
}

/** One node's result in one round of the lock (RedlockOptions.onNodeResult). */
export interface NodeResult {
  /** The node's index in the Redlock's clients. */
  readonly node: number;
  /** The round it was in: `publish` is an acquire's second round, to the nodes whose counter was behind. */
  readonly phase: "acquire" | "publish" | "extend" | "release";
  /** Milliseconds from the round's start to the node's answer, or to when it was known not to count. */
  readonly ms: number;
  /**
   * Absent: the node answered (whatever it answered: granted, held by another, confirmed or not). A
   * `timeout` is reported nodeTimeoutMs after the round started, also when the round had ended sooner.
   */
  readonly failure?: Extract<NodeFailure, { reason: "refused" | "timeout" | "error" }> | undefined;
}

export interface AcquireOptions {
  readonly retryCount?: number | undefined;
  /** Abandons the retry loop (not an attempt in flight). */
  readonly signal?: AbortSignal | undefined;
}

/**
 * What identifies a lease on the nodes: enough for a process other than the one that acquired it
 * (for example another instance of a stateless HTTP gateway) to extend or release it. `value` is the
 * lease's random secret (`Lease.value`): whoever knows it can extend or release that lease, nothing
 * more. A lease of one resource is `{ resource, token, value }`; a lease of several is
 * `{ fences: [{ resource, token }, …], value }`, every resource it holds in its order (a Lease is both).
 */
export type HeldLease = HeldOne | HeldSet;

interface HeldCommon {
  readonly value: string;
  /** Epoch ms: the lease's validUntil when it was handed on. extend(held) confirms only before it. */
  readonly validUntil?: number | undefined;
}

interface HeldOne extends HeldCommon {
  readonly resource: string;
  readonly token: bigint;
}

interface HeldSet extends HeldCommon {
  readonly fences: readonly { readonly resource: string; readonly token: bigint }[];
}

/** A HeldLease as the lock uses it: every resource with its token, in the lease's order. */
export interface CheckedHeld {
  readonly fences: readonly HeldFence[];
  readonly value: string;
  readonly validUntil?: number | undefined;
}

/** The options with their defaults applied, all checked. */
export interface Settings {
  readonly driftFactor: number;
  readonly retryCount: number;
  readonly retryDelayMs: number;
  readonly retryJitterMs: number;
  readonly nodeTimeoutMs: number;
  readonly automaticExtensionThresholdMs: number | undefined;
  readonly extensionAttempts: number;
  readonly onNodeResult: ((result: NodeResult) => void) | undefined;
}

/** Redis's PX and Node's timers both stop at 2^31 - 1 ms (a longer Node timer fires at once). */
const MAX_MS = 2 ** 31 - 1;

// What the lock generates for a lease (16 random bytes in hex); anything else cannot be a lease value.
const LEASE_VALUE = /^[0-9a-f]{32}$/;

function assertObject(value: unknown, argument: string, shape: string): asserts value is Record<string, unknown> {
  if (typeof value !== "object" || value === null) throw new InvalidArgumentError(argument, `must be an object ${shape}`);
}

/** A number of milliseconds in [min, MAX_MS]. */
function checkMs(value: unknown, argument: string, min: number): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < min || value > MAX_MS) {
    throw new InvalidArgumentError(argument, `must be a number of milliseconds between ${min} and ${MAX_MS}, got ${String(value)}`);
  }
  return value;
}

function checkRetryCount(value: unknown, argument: string): number {
  if (value === Number.POSITIVE_INFINITY || (typeof value === "number" && Number.isInteger(value) && value >= 0)) return value;
  throw new InvalidArgumentError(argument, `must be a non-negative integer or Infinity, got ${String(value)}`);
}

/**
 * The shortest TTL the lock grants. A lease is of use only if its holder can act on it before it
 * ends: acquiring costs a round trip to every node, each ACQUIRE waits for its node's fsync
 * (appendfsync always: a few ms on a local SSD, tens of ms on network disks), and the holder then
 * needs at least one more round trip (a fenced write; using() extends at half the validity, which
 * must fit an extension round). Below 100 ms an ordinary fsync, GC pause or event-loop stall uses up
 * most of the lease, and it would routinely run out before its first use; 100 ms leaves room for a
 * few such delays. Larger TTLs are what a lease is for (a deadline for work that takes a while).
 */
export const MIN_TTL_MS = 100;

/** A TTL's type and range: an integer number of milliseconds in [MIN_TTL_MS, MAX_MS]. */
export function assertTtl(ttlMs: unknown, argument = "ttlMs"): asserts ttlMs is number {
  if (typeof ttlMs === "number" && Number.isInteger(ttlMs) && ttlMs < MIN_TTL_MS) {
    throw new InvalidArgumentError(
      argument,
      `must be at least ${MIN_TTL_MS} milliseconds, got ${ttlMs}: a shorter lease would run out before its holder could use it`,
    );
  }
  if (typeof ttlMs !== "number" || !Number.isInteger(ttlMs) || ttlMs > MAX_MS) {
    throw new InvalidArgumentError(
      argument,
      `must be an integer number of milliseconds between ${MIN_TTL_MS} and ${MAX_MS}, got ${String(ttlMs)}`,
    );
  }
}

/**
 * A TTL a Redlock with this driftFactor can grant: assertTtl's range, and at least 1 ms of validity
 * left after the drift allowance — without it, every round would take the lease and give it back.
 * Not checked against nodeTimeoutMs: that bounds the slow case, while nodes usually answer far
 * sooner, so a TTL shorter than the timeout still gets a lease whenever the nodes answer in time
 * (a round that takes longer leaves no validity, and counts as failed).
 */
export function checkTtl(ttlMs: unknown, driftFactor: number, argument = "ttlMs"): asserts ttlMs is number {
  assertTtl(ttlMs, argument);
  const drift = driftMs(ttlMs, driftFactor);
  if (ttlMs - drift < 1) {
    throw new InvalidArgumentError(
      argument,
      `${ttlMs} milliseconds leaves no validity after the drift allowance of ${drift} milliseconds (driftFactor ${driftFactor} × TTL + 2)`,
    );
  }
}

/** The clock drift allowance for a TTL; what an acquire or extension subtracts from its validity. */
export function driftMs(ttlMs: number, driftFactor: number): number {
  return ttlMs * driftFactor + 2;
}

export function checkSettings(options: unknown): Settings {
  if (options === undefined) options = {};
  assertObject(options, "options", "of Redlock options");
  const {
    driftFactor = 0.01,
    retryCount = 10,
    retryDelayMs = 200,
    retryJitterMs = 100,
    nodeTimeoutMs = 200,
    automaticExtensionThresholdMs,
    extensionAttempts = 3,
    onNodeResult,
  } = options;
  if (typeof driftFactor !== "number" || !(driftFactor >= 0 && driftFactor < 1)) {
    throw new InvalidArgumentError("options.driftFactor", `must be a number in [0, 1), got ${String(driftFactor)}`);
  }
  if (typeof extensionAttempts !== "number" || !Number.isInteger(extensionAttempts) || extensionAttempts < 1) {
    throw new InvalidArgumentError("options.extensionAttempts", `must be a positive integer, got ${String(extensionAttempts)}`);
  }
  if (onNodeResult !== undefined && typeof onNodeResult !== "function")
    throw new InvalidArgumentError("options.onNodeResult", "must be a function (result) => void");
  return {
    driftFactor,
    retryCount: checkRetryCount(retryCount, "options.retryCount"),
    retryDelayMs: checkMs(retryDelayMs, "options.retryDelayMs", 0),
    retryJitterMs: checkMs(retryJitterMs, "options.retryJitterMs", 0),
    nodeTimeoutMs: checkMs(nodeTimeoutMs, "options.nodeTimeoutMs", 1),
    automaticExtensionThresholdMs:
      automaticExtensionThresholdMs === undefined
        ? undefined
        : checkMs(automaticExtensionThresholdMs, "options.automaticExtensionThresholdMs", 0),
    extensionAttempts,
    onNodeResult: onNodeResult as Settings["onNodeResult"],
  };
}

/** AcquireOptions, checked; `retryCount` falls back to the Redlock's. */
export function checkAcquireOptions(
  options: unknown,
  defaultRetryCount: number,
): { readonly retryCount: number; readonly signal: AbortSignal | undefined } {
  if (options === undefined) return { retryCount: defaultRetryCount, signal: undefined };
  assertObject(options, "options", "{ retryCount?, signal? }");
  const { retryCount = defaultRetryCount, signal } = options;
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw new InvalidArgumentError("options.signal", "must be an AbortSignal");
  return { retryCount: checkRetryCount(retryCount, "options.retryCount"), signal };
}

/**
 * A HeldLease, checked and copied (each field read once: a getter cannot show the check one value and
 * the nodes another). `fences`, when present, is the lease (a Lease carries both it and its first
 * resource as `resource`); its resources must make a set a lease can hold (no repeats).
 */
export function checkHeld(held: unknown, argument = "held"): CheckedHeld {
  assertObject(held, argument, "{ resource, token, value } or { fences, value }");
  const { resource, token, fences, value, validUntil } = held;
  let checked: HeldFence[];
  if (fences === undefined) {
    assertResource(resource, `${argument}.resource`);
    assertToken(token, `${argument}.token`);
    checked = [{ resource, token }];
  } else {
    if (!Array.isArray(fences)) throw new InvalidArgumentError(`${argument}.fences`, "must be an array of { resource, token }");
    checked = (fences as unknown[]).map((fence, i) => {
      assertObject(fence, `${argument}.fences[${i}]`, "{ resource, token }");
      const { resource: r, token: t } = fence;
      assertResource(r, `${argument}.fences[${i}].resource`);
      assertToken(t, `${argument}.fences[${i}].token`);
      return { resource: r, token: t };
    });
    checkResources(
      checked.map((f) => f.resource),
      `${argument}.fences`,
    );
  }
  if (typeof value !== "string" || !LEASE_VALUE.test(value))
    throw new InvalidArgumentError(`${argument}.value`, "is not a lease value (32 lowercase hex digits)");
  if (validUntil === undefined) return { fences: checked, value };
  if (typeof validUntil !== "number" || !Number.isFinite(validUntil))
    throw new InvalidArgumentError(`${argument}.validUntil`, "must be epoch milliseconds (a finite number)");
  return { fences: checked, value, validUntil };
}

/**
 * The clients, checked: at least one, each with the commands the lock sends. A node is addressed by
 * its index, so the array is copied: later changes to the caller's array do not move the quorum.
 */
export function checkClients<C>(clients: unknown): C[] {
  if (!Array.isArray(clients) || clients.length === 0)
    throw new InvalidArgumentError("clients", "must be a non-empty array of Redis clients (one per node)");
  clients.forEach((client: unknown, i) => {
    const c = client as Record<string, unknown> | null;
    if (
      typeof c !== "object" ||
      c === null ||
      typeof c.evalsha !== "function" ||
      typeof c.eval !== "function" ||
      typeof c.script !== "function"
    ) {
      throw new InvalidArgumentError(
        `clients[${i}]`,
        "must be an ioredis (5 or 6) or iovalkey client, Redis or Cluster, with evalsha(), eval() and script(); a node-redis client goes through fromNodeRedis()",
      );
    }
  });
  return [...(clients as C[])];
}
