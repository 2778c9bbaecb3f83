import { performance } from "node:perf_hooks";
import { MAX_TOKEN } from "@fenced/fence";
import { redisErrorCode, type RedisClient } from "./client.js";
import type { NodeFailure } from "./errors.js";
import { connectionFailure, connectionTrouble, failureOf, lateFailure, onAnyDown, type NodeWatch } from "./node-watch.js";
import { notBefore } from "./not-before.js";
import { INTEGER_REPLY_LIMIT, type Script } from "./scripts.js";

/** One node's answer to one fan-out: a value, or why it does not count. */
export type Reply<T> =
  | { readonly ok: true; readonly value: T }
  /** `unsent`: the node was not sent the call (it was known down, or the outcome was known first). */
  | { readonly ok: false; readonly failure: NodeFailure; readonly unsent?: true };

export function quorumOf(nodes: number): number {
  return Math.floor(nodes / 2) + 1;
}

/** One script run on one node: the client, and the keys and arguments after the script's sha. */
export interface ScriptCall {
  readonly script: Script;
  readonly keys: readonly string[];
  readonly args: readonly (string | number)[];
}

/**
 * After a NOSCRIPT answer, the node's second call: the same call as EVAL (which also caches the
 * script), or, when `stillWanted` says the call must not run any more, only SCRIPT LOAD; undefined
 * when the error is anything else.
 *
 * The EVAL runs after whatever this client sent on the connection in the meantime, so it can
 * overtake commands that were meant to follow it. An acquire answered NOSCRIPT after its attempt
 * ended must not run at all, or it would run after that attempt's release and leave a lease key
 * behind for the whole TTL; the script is then only loaded (no side effects), so that the node can
 * serve the next call. That load's answer is the node's answer for an observer: the node is up, or
 * the load failed. It is never counted as the call's reply, because a caller's `stillWanted` turns
 * false only once its fan-out has resolved (acquire-round.ts), and a fan-out ignores later replies.
 */
export function fallBack(client: RedisClient, call: ScriptCall, err: unknown, stillWanted?: () => boolean): Promise<unknown> | undefined {
  if (redisErrorCode(err) !== "NOSCRIPT") return undefined;
  const { script, keys, args } = call;
  if (stillWanted === undefined || stillWanted()) return client.eval(script.source, keys.length, ...keys, ...args);
  return client.script("LOAD", script.source);
}

/** How a fan-out sends to one node, reads its answer, and decides when it is over. */
export interface FanOut<T> {
  /** The call to node `node`. */
  send(node: number): Promise<unknown>;
  /** Called with each reply as it arrives (callers keep their own tally): true once the outcome is known. */
  decided(reply: Reply<T>, node: number): boolean;
  /** The node's answer as a T; throwing makes it an error reply. Default: the answer itself. */
  parse?(raw: unknown): T;
  /** A second call after `send` failed with `err` (a NOSCRIPT answer: see fallBack), or undefined. Asked even after the fan-out resolved. */
  retry?(node: number, err: unknown): Promise<unknown> | undefined;
  /** The watches of the nodes' connections (node-watch.ts), by node; undefined where a client has none. */
  readonly watches?: readonly (NodeWatch | undefined)[];
  /**
   * A cleanup call (RELEASE): every node gets it, also once the outcome is known, and also a node
   * known down — its client queues it behind whatever it queued for that node before, so a late
   * ACQUIRE there is undone when the node is back — but the fan-out does not wait for a node known down.
   * Otherwise a node known down is not sent the call, nor is any node once the outcome is known.
   */
  readonly cleanup?: boolean;
  /**
   * Told each node's result once (RedlockOptions.onNodeResult): that it answered, or why not
   * (refused, timeout, error), and how long that took from the fan-out's start. An answer that comes
   * after the outcome was known is told too (after a NOSCRIPT, the answer to `retry`'s call), and a
   * node still silent `timeoutMs` after the start is told `timeout` then; a node not sent the call
   * (the outcome was known first) is not told. Absent: nothing is timed.
   */
  readonly observe?: ((node: number, ms: number, failure?: NodeFailure) => void) | undefined;
}

/**
 * Sends to every node at once and resolves as soon as `decided` says the outcome is known,
 * every node has answered, or `timeoutMs` has passed (unanswered nodes then read as timeouts, or as
 * the error their connection is down with). A node whose client is known down (node-watch.ts) fails
 * at once as `refused`, before anything is sent, and so does a node seen down while the round waits
 * for it. One timer per fan-out, not one per node: the timeout is per node in effect, since all
 * requests leave together. Each node's call costs one promise reaction, with parsing and the NOSCRIPT
 * retry inside it: this runs for every node of every operation, and each avoided promise shows up in
 * the lock's throughput. Replies that arrive after resolution are ignored; callers that must clean up
 * after slow nodes (acquire) address every node they sent to again (the replies say which: `unsent`).
 */
export function fanOut<T>(count: number, timeoutMs: number, how: FanOut<T>): Promise<Reply<T>[]> {
  return new Promise((resolve) => {
    const replies: (Reply<T> | undefined)[] = new Array<Reply<T> | undefined>(count).fill(undefined);
    const watches = how.watches ?? [];
    let answered = 0;
    let done = false;
    // False until the nodes that are up have been sent the call; a node still unanswered then was never
    // asked. A cleanup call goes to every node whatever happens.
    let asked = how.cleanup === true;
    let stopWatching = (): void => undefined;
    const started = performance.now();
    const observing = how.observe === undefined ? undefined : observer(count, started, timeoutMs, how.observe);
    const finish = (timedOut: boolean): void => {
      if (done) return;
      done = true;
      cancelTimer();
      stopWatching();
      if (asked) observing?.silentUntil(timedOut ? 0 : undefined, (node) => lateFailure(node, watches[node]));
      resolve(
        replies.map((r, node) => {
          if (r !== undefined) return r;
          const failure: NodeFailure = timedOut ? lateFailure(node, watches[node]) : { node, reason: "unanswered" };
          return asked ? { ok: false, failure } : { ok: false, failure, unsent: true };
        }),
      );
    };
    // A node counts once: the first of its reply, its failure, or its being seen down.
    const settle = (node: number, reply: Reply<T>): void => {
      observing?.tell(node, reply.ok ? undefined : reply.failure);
      if (done || replies[node] !== undefined) return;
      replies[node] = reply;
      answered++;
      if (how.decided(reply, node) || answered === count) finish(false);
    };
    const failed = (node: number, err: unknown): void => settle(node, { ok: false, failure: failureOf(node, err, watches[node]) });
    const watch = (node: number, call: Promise<unknown>, first: boolean): void => {
      call.then(
        (raw) => {
          if (done || replies[node] !== undefined) observing?.tell(node);
          else settle(node, parsed(how, node, raw, watches[node]));
        },
        (err: unknown) => {
          const again = first ? how.retry?.(node, err) : undefined;
          if (again !== undefined) watch(node, again, false);
          else failed(node, err);
        },
      );
    };
    const cancelTimer = notBefore(started, timeoutMs, () => finish(true));
    // Nodes known down count first, so that a quorum they make impossible is known before anything is sent.
    for (let node = 0; node < count && connectionTrouble(); node++) {
      const down = watches[node]?.down;
      if (down === undefined) continue;
      if (how.cleanup === true) watch(node, how.send(node), true);
      const failure = connectionFailure(node, down);
      settle(node, how.cleanup === true ? { ok: false, failure } : { ok: false, failure, unsent: true });
    }
    if (done && how.cleanup !== true) return;
    asked = true;
    for (let node = 0; node < count; node++) if (replies[node] === undefined) watch(node, how.send(node), true);
    if (done || watches.length === 0) return;
    // A node whose client sees it down while the round waits for it: its call stays queued in the client, the round stops waiting.
    stopWatching = onAnyDown(() => {
      for (let node = 0; node < count; node++) {
        const down = replies[node] === undefined ? watches[node]?.down : undefined;
        if (down !== undefined) settle(node, { ok: false, failure: connectionFailure(node, down) });
      }
    });
  });
}

/** A node's answer as its reply: what `how.parse` reads in it, or what that throws as the node's failure. */
function parsed<T>(how: FanOut<T>, node: number, raw: unknown, watch: NodeWatch | undefined): Reply<T> {
  try {
    return { ok: true, value: how.parse === undefined ? (raw as T) : how.parse(raw) };
  } catch (err) {
    return { ok: false, failure: failureOf(node, err, watch) };
  }
}

/** What one node said to the acquire script: granted the whole set or none of it, and each resource's counter. */
export interface Grant {
  readonly granted: boolean;
  /** By resource, in the set's order. */
  readonly counters: readonly bigint[];
}

/** Reads one node's ACQUIRE reply for a set of `resources` resources: {flag, counter_1, …, counter_n}. */
export function parseGrant(raw: unknown, resources: number): Grant {
  if (!Array.isArray(raw) || raw.length !== resources + 1) throw new Error(`unexpected acquire reply: ${JSON.stringify(raw)}`);
  const counters: bigint[] = [];
  for (let i = 1; i <= resources; i++) counters.push(parseCounter(raw[i]));
  return { granted: raw[0] === 1, counters };
}

function parseCounter(counter: unknown): bigint {
  // ACQUIRE sends integer replies only below INTEGER_REPLY_LIMIT, where every client reads them
  // exactly; a larger number cannot be trusted to be the counter. Larger counters arrive as decimal strings.
  if (typeof counter === "number" && Number.isInteger(counter) && counter >= 0 && counter < INTEGER_REPLY_LIMIT) return BigInt(counter);
  if (typeof counter !== "string" || !/^\d+$/.test(counter)) throw new Error(`unexpected fence counter: ${String(counter)}`);
  return BigInt(counter);
}

/** The token a set of acquire replies points to for one resource, and which granting nodes count for it. */
export interface TokenChoice {
  readonly token: bigint;
  /** Granting nodes whose own INCR returned exactly `token`: they count without another round trip. */
  readonly counted: readonly number[];
  /** Granting nodes below `token`: publishing can raise them to it and make them count. */
  readonly behind: readonly number[];
}

/**
 * Chooses the candidate token of resource `resource` (its index in the set; PROTOCOL.md, "Choosing
 * the token"). Every resource is chosen on its own, from its own counters, exactly as a lease of that
 * resource alone: the nodes that granted are the same for all (a node grants the whole set or
 * nothing), and what counts is per resource. The base is the maximum counter among the nodes that
 * granted us the lease: any earlier lease was counted on a majority, which shares a node with our
 * granting majority, whose INCR therefore returned more than that token. A node that refused us
 * but reported a higher counter than every granting node is evidence that a granting node lost
 * data; the candidate then goes one past it, so that the token cannot repeat a value that node's
 * counter already passed. Equal counters on refusing nodes do not raise it: that is the ordinary
 * footprint of a competitor's failed attempt, and raising on it would cost a publish round trip
 * under contention for nothing. Returns undefined while fewer than a quorum granted.
 */
export function chooseToken(replies: readonly (Reply<Grant> | undefined)[], quorum: number, resource = 0): TokenChoice | undefined {
  let grantedCount = 0;
  let grantMax = -1n;
  let refusedMax = -1n;
  for (const reply of replies) {
    if (reply === undefined || !reply.ok) continue;
    const counter = reply.value.counters[resource] as bigint;
    if (reply.value.granted) {
      grantedCount++;
      if (counter > grantMax) grantMax = counter;
    } else if (counter > refusedMax) {
      refusedMax = counter;
    }
  }
  if (grantedCount < quorum) return undefined;
  const token = refusedMax > grantMax ? refusedMax + 1n : grantMax;
  const counted: number[] = [];
  const behind: number[] = [];
  replies.forEach((reply, node) => {
    if (reply === undefined || !reply.ok || !reply.value.granted) return;
    if (reply.value.counters[resource] === token) counted.push(node);
    else behind.push(node);
  });
  return { token, counted, behind };
}

/** chooseToken for every resource of a set of `resources`, in order; undefined while fewer than a quorum granted. */
export function chooseTokens(replies: readonly (Reply<Grant> | undefined)[], quorum: number, resources: number): TokenChoice[] | undefined {
  const choices: TokenChoice[] = [];
  for (let i = 0; i < resources; i++) {
    const choice = chooseToken(replies, quorum, i);
    if (choice === undefined) return undefined;
    choices.push(choice);
  }
  return choices;
}

/**
 * Whether a resource of the set has run out of tokens (PROTOCOL.md, "The counter ceiling"): its
 * candidate token would pass 2^63 - 1, or so many nodes report its counter at the ceiling (where
 * ACQUIRE refuses without setting anything) that no quorum can ever grant. Returns the first such
 * resource's index and the highest counter seen for it, undefined otherwise. A node at the ceiling in
 * a minority, below a quorum that grants with a lower counter, is not yet exhaustion: that quorum's
 * token is valid, and a later round will see the ceiling.
 */
export function ceilingReached(
  replies: readonly (Reply<Grant> | undefined)[],
  choices: readonly TokenChoice[] | undefined,
  quorum: number,
  resources: number,
): { readonly resource: number; readonly highest: bigint } | undefined {
  for (let resource = 0; resource < resources; resource++) {
    let atCeiling = 0;
    let highest = -1n;
    for (const reply of replies) {
      if (reply === undefined || !reply.ok) continue;
      const counter = reply.value.counters[resource] as bigint;
      if (counter > highest) highest = counter;
      if (!reply.value.granted && counter >= MAX_TOKEN) atCeiling++;
    }
    const exhausted = choices !== undefined ? (choices[resource] as TokenChoice).token > MAX_TOKEN : atCeiling > replies.length - quorum;
    if (exhausted) return { resource, highest };
  }
  return undefined;
}

/**
 * Incremental view of an acquire fan-out, updated per reply so that deciding costs O(resources) per
 * reply: decided once a quorum granted and, for every resource, a quorum of granting nodes has the
 * same maximum counter and no refusing node is above it (the steady state: no publish round trip),
 * or once so many refused that no quorum is possible.
 */
export class AcquireTally {
  #refused = 0;
  readonly #grantMax: bigint[];
  readonly #atGrantMax: number[];
  readonly #refusedMax: bigint[];
  constructor(
    readonly nodes: number,
    readonly quorum: number,
    readonly resources = 1,
  ) {
    this.#grantMax = new Array<bigint>(resources).fill(-1n);
    this.#atGrantMax = new Array<number>(resources).fill(0);
    this.#refusedMax = new Array<bigint>(resources).fill(-1n);
  }

  add(reply: Reply<Grant>): boolean {
    if (!reply.ok || !reply.value.granted) {
      this.#refused++;
      if (reply.ok)
        reply.value.counters.forEach((counter, i) => {
          if (counter > (this.#refusedMax[i] as bigint)) this.#refusedMax[i] = counter;
        });
    } else {
      reply.value.counters.forEach((counter, i) => {
        const max = this.#grantMax[i] as bigint;
        if (counter > max) {
          this.#grantMax[i] = counter;
          this.#atGrantMax[i] = 1;
        } else if (counter === max) {
          this.#atGrantMax[i] = (this.#atGrantMax[i] as number) + 1;
        }
      });
    }
    if (this.#refused > this.nodes - this.quorum) return true;
    for (let i = 0; i < this.resources; i++)
      if ((this.#atGrantMax[i] as number) < this.quorum || (this.#refusedMax[i] as bigint) > (this.#grantMax[i] as bigint)) return false;
    return true;
  }
}

/** Per-node reasons of a failed fan-out, for errors. */
export function failures<T>(replies: readonly Reply<T>[], isFailure: (value: T, node: number) => NodeFailure | undefined): NodeFailure[] {
  const out: NodeFailure[] = [];
  replies.forEach((reply, node) => {
    if (!reply.ok) out.push(reply.failure);
    else {
      const failure = isFailure(reply.value, node);
      if (failure !== undefined) out.push(failure);
    }
  });
  return out;
}

/**
 * The per-node results of one fan-out, each told once (FanOut.observe). `silentUntil` is called when
 * the fan-out ends: with 0 (its timeout) the nodes still silent are told at once; otherwise they are
 * told when `timeoutMs` has passed since the start, unless they answer before (a timer that does not
 * keep the process alive, cleared once every node was told).
 */
function observer(
  count: number,
  started: number,
  timeoutMs: number,
  observe: NonNullable<FanOut<unknown>["observe"]>,
): { tell(node: number, failure?: NodeFailure): void; silentUntil(after: 0 | undefined, failure: (node: number) => NodeFailure): void } {
  const told = new Array<boolean>(count).fill(false);
  let untold = count;
  let cancelTimer = (): void => undefined;
  const tell = (node: number, failure?: NodeFailure): void => {
    if (told[node] === true) return;
    told[node] = true;
    untold--;
    if (untold === 0) cancelTimer();
    observe(node, performance.now() - started, failure);
  };
  const silentUntil = (after: 0 | undefined, failure: (node: number) => NodeFailure): void => {
    const tellSilent = (): void => {
      for (let node = 0; node < count; node++) if (told[node] !== true) tell(node, failure(node));
    };
    if (untold === 0) return;
    if (after === 0) {
      tellSilent();
      return;
    }
    cancelTimer = notBefore(started, timeoutMs, tellSilent, { unref: true });
  };
  return { tell, silentUntil };
}
