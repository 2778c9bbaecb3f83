import { errorMonitor } from "node:events";
import { redisErrorCode, type RedisClient } from "./client.js";
import type { NodeFailure } from "./errors.js";

/**
 * What the lock learns of a node's connection from its client, and how it names a node's failure.
 *
 * ioredis does not fail a command while a node is down: it queues it (the offline queue) until the
 * connection is back, so a round would wait `nodeTimeoutMs` for a node that refused the connection
 * long ago. The lock therefore watches each client's connection errors — as a monitor only: through
 * `events.errorMonitor`, which does not count as an "error" listener, so it neither handles the
 * errors nor changes what the client does with them (ioredis prints them when the application has no
 * listener of its own; it then emits none, and the lock sees none). Listeners are added once per
 * client, however many Redlocks share it, and removed when the client ends (`quit`, `disconnect`).
 * An application that removes them (`removeAllListeners`) leaves the watch blind: it is then
 * dropped, its record with it, and the client watched anew from the next round.
 */

/** The last error of a client's connection. */
export interface ConnectionError {
  /** The system error code: ECONNREFUSED, ECONNRESET, ETIMEDOUT, ENOTFOUND, … */
  readonly code: string;
  readonly detail: string;
  /** Opening the connection failed (the node did not accept it), as opposed to losing one that was up. */
  readonly connecting: boolean;
}

/** The parts of an ioredis Redis or Cluster the watch reads: its status, and its events. */
interface Observable {
  readonly status: string;
  on(event: string | symbol, listener: (...args: never[]) => void): unknown;
  removeListener(event: string | symbol, listener: (...args: never[]) => void): unknown;
  listenerCount(event: string | symbol, listener?: (...args: never[]) => void): number;
}

// The statuses in which ioredis holds commands until a connection is (re)established. In "ready" and
// "connect" the socket is up; "wait" has not tried yet; "end" fails commands at once by itself.
const WAITING_FOR_CONNECTION: ReadonlySet<string> = new Set(["connecting", "reconnecting", "close"]);

// System calls that open a connection: their failure means the node did not accept one.
const CONNECTING_CALLS: ReadonlySet<string> = new Set(["connect", "getaddrinfo"]);

// How many watched clients have a connection error on record: while none has, a round skips looking
// for nodes known down (the steady state pays one comparison per round, not one per node). A client
// dropped with an error on record, without ending, stays counted: rounds then only look needlessly.
let troubled = 0;

/** Whether any watched client has a connection error on record (a node may be known down). */
export function connectionTrouble(): boolean {
  return troubled > 0;
}

export class NodeWatch {
  readonly #client: Observable;
  /** The last connection error since the client last connected (cleared on "connect"). */
  #last: ConnectionError | undefined;
  readonly #listeners: readonly (readonly [string | symbol, (...args: never[]) => void])[];

  #detached = false;

  constructor(client: Observable) {
    this.#client = client;
    this.#listeners = [
      [errorMonitor, (err: unknown) => this.#failed(err)],
      ["connect", () => this.#record(undefined)],
      ["end", () => this.#detach()],
    ];
    for (const [event, listener] of this.#listeners) client.on(event, listener);
  }

  /**
   * The watch no longer sees the client's events: the client ended, or a listener of the watch was
   * removed by someone else (`removeAllListeners`), after which an error on record might never be
   * cleared. Either way it is dropped, and a client that is (or connects) again gets a new watch (watchOf).
   */
  get detached(): boolean {
    if (!this.#detached && !this.#attached()) this.#detach();
    return this.#detached;
  }

  /** The connection is down, and this is what it last failed with; undefined while it is up, nothing was seen, or the watch is detached. */
  get broken(): ConnectionError | undefined {
    if (this.#last === undefined || this.detached) return undefined;
    return WAITING_FOR_CONNECTION.has(this.#client.status) ? this.#last : undefined;
  }

  /** The node is known down: the client's last attempt to connect failed, and it has not connected since. */
  get down(): ConnectionError | undefined {
    const broken = this.broken;
    return broken?.connecting === true ? broken : undefined;
  }

  #failed(err: unknown): void {
    const seen = connectionError(err);
    if (seen === undefined) return;
    this.#record(seen);
    if (this.down !== undefined) for (const listener of downListeners.slice()) listener?.();
  }

  #record(last: ConnectionError | undefined): void {
    if ((this.#last === undefined) !== (last === undefined)) troubled += last === undefined ? -1 : 1;
    this.#last = last;
  }

  #attached(): boolean {
    for (const [event, listener] of this.#listeners) if (this.#client.listenerCount(event, listener) === 0) return false;
    return true;
  }

  #detach(): void {
    this.#record(undefined);
    this.#detached = true;
    for (const [event, listener] of this.#listeners) this.#client.removeListener(event, listener);
    if (watches.get(this.#client) === this) watches.delete(this.#client);
  }
}

// One watch per client, shared by every Redlock using it: listeners never pile up on a client.
const watches = new WeakMap<object, NodeWatch>();

// The rounds waiting for nodes. One entry per round, not per node: registering costs a round a slot,
// and a node seen down (rare) has each round check its own nodes. A slot of a plain array, emptied
// when the round stops watching, not a Set entry: a Set taking and dropping one entry a round would,
// once a mark-compact under load had promoted its hash table, keep every round's listener (and what
// its closure holds) alive into old space, through the chain V8 links from each hash table it
// replaces to the next.
const downListeners: ((() => void) | undefined)[] = [];
/** Empty slots of downListeners, taken before it grows. */
const freeSlots: number[] = [];

/** Calls `listener` whenever any watched node is seen down, until the returned function is called. */
export function onAnyDown(listener: () => void): () => void {
  const slot = freeSlots.pop() ?? downListeners.length;
  downListeners[slot] = listener;
  return () => {
    if (downListeners[slot] !== listener) return;
    downListeners[slot] = undefined;
    freeSlots.push(slot);
  };
}

/** The client's watch, started on first use; undefined for a client that has no events to watch, or has ended. */
export function watchOf(client: RedisClient): NodeWatch | undefined {
  const existing = watches.get(client);
  if (existing !== undefined && !existing.detached) return existing;
  const c = client as Partial<Record<keyof Observable, unknown>>;
  if (
    typeof c.status !== "string" ||
    c.status === "end" ||
    typeof c.on !== "function" ||
    typeof c.removeListener !== "function" ||
    typeof c.listenerCount !== "function"
  )
    return undefined;
  const watch = new NodeWatch(client as unknown as Observable);
  watches.set(client, watch);
  return watch;
}

/**
 * A Node.js system error's code and call; undefined for any other error. A Cluster's errors are not
 * among them: ioredis reports its nodes' refused connections to it as "Connection is closed." (in a
 * ClusterAllFailedError), with no code, so a Cluster client's nodes are never known down.
 */
function systemError(err: unknown): { readonly code: string; readonly syscall: string | undefined; readonly detail: string } | undefined {
  if (!(err instanceof Error)) return undefined;
  const { code, syscall } = err as Error & { code?: unknown; syscall?: unknown };
  if (typeof code !== "string") return undefined;
  return { code, syscall: typeof syscall === "string" ? syscall : undefined, detail: err.message };
}

function connectionError(err: unknown): ConnectionError | undefined {
  const system = systemError(err);
  if (system?.syscall !== undefined) return { code: system.code, detail: system.detail, connecting: CONNECTING_CALLS.has(system.syscall) };
  // A host with several addresses (`localhost` as 127.0.0.1 and ::1, a dual-stack name): Node tries
  // each in turn (autoSelectFamily, on by default) and, when none connects, fails with an
  // AggregateError holding one error per address, with the first one's code and no syscall. It is
  // a failure to connect only if every address failed to connect.
  const attempts = err instanceof Error ? (err as Error & { errors?: unknown }).errors : undefined;
  if (!Array.isArray(attempts) || attempts.length === 0) return undefined;
  const each: ConnectionError[] = [];
  for (const attempt of attempts) {
    const seen = connectionError(attempt);
    if (seen === undefined) return undefined;
    each.push(seen);
  }
  return {
    code: system?.code ?? (each[0] as ConnectionError).code,
    detail: each.map((e) => e.detail).join("; "),
    connecting: each.every((e) => e.connecting),
  };
}

/** A node whose connection failed: `refused` when it did not accept one, `error` with the code when one was lost. */
export function connectionFailure(node: number, failed: ConnectionError): NodeFailure {
  return { node, reason: failed.connecting ? "refused" : "error", code: failed.code, detail: failed.detail };
}

/**
 * Why a call to a node failed, classified by the error's code, never its text: a system error's
 * code (ECONNREFUSED is `refused`), else a Redis error reply's code (WRONGTYPE, ERR, …). An error of
 * the client's own has neither (ioredis's "Connection is closed.", MaxRetriesPerRequestError, an
 * offline queue that is off): then what the connection last failed with, if it is down, says why.
 */
export function failureOf(node: number, err: unknown, watch: NodeWatch | undefined): NodeFailure {
  const detail = err instanceof Error ? err.message : String(err);
  const system = systemError(err);
  if (system?.code === "ECONNREFUSED") return { node, reason: "refused", code: system.code, detail };
  const code = system?.code ?? redisErrorCode(err);
  if (code !== undefined) return { node, reason: "error", code, detail };
  const broken = watch?.broken;
  if (broken !== undefined) return connectionFailure(node, broken);
  return { node, reason: "error", detail };
}

/** A node that did not answer within the round's timeout: its connection's error if it is down, else `timeout`. */
export function lateFailure(node: number, watch: NodeWatch | undefined): NodeFailure {
  const broken = watch?.broken;
  return broken === undefined ? { node, reason: "timeout" } : connectionFailure(node, broken);
}
