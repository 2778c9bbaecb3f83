import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { assertResource, InvalidArgumentError } from "@fenced/fence";
import { checkResources } from "@fenced/fence/internal";
import { acquireRound, type RoundNodes } from "./acquire-round.js";
import type { RedisClient } from "./client.js";
import { LeaseLostError, LockNotAcquiredError, type HeldFence, type NodeFailure } from "./errors.js";
import { resourceKeys } from "./keys.js";
import { Lease, leaseInternals, leaseLost } from "./lease.js";
import { nodeEvents, observed } from "./observe.js";
import { watchOf, type NodeWatch } from "./node-watch.js";
import { sendScript } from "./pipelining.js";
import {
  checkAcquireOptions,
  checkClients,
  checkHeld,
  checkSettings,
  checkTtl,
  driftMs,
  type AcquireOptions,
  type HeldLease,
  type NodeResult,
  type RedlockOptions,
  type Settings,
} from "./options.js";
import { failures, fallBack, fanOut, quorumOf, type ScriptCall } from "./quorum.js";
import { SCRIPTS } from "./scripts.js";

export type { AcquireOptions, HeldLease, RedlockOptions } from "./options.js";

/** One resource, or several to hold together in one lease (all or none, a token for each). */
export type Resources = string | readonly string[];

/**
 * Redlock over N independent Redis nodes, with fencing tokens that are unique per resource and
 * strictly increasing across acquisitions (PROTOCOL.md states the invariant and why it holds).
 */
// Satisfies LeaseOwner (lease.ts) structurally, without `implements`: its two methods are internal
// (stripped from the published declarations), where a declared `implements` would then not hold.
export class Redlock {
  readonly clients: readonly RedisClient[];
  readonly quorum: number;
  readonly #settings: Settings;
  /** By node: the watch of its client's connection (node-watch.ts), renewed by #currentWatches once a client ended. */
  readonly #watches: (NodeWatch | undefined)[];
  /** What an acquisition round (acquire-round.ts) uses of this Redlock. */
  readonly #round: RoundNodes;

  /** One client per independent node (a Cluster client counts as one node). Throws InvalidArgumentError on bad input. */
  constructor(clients: readonly RedisClient[], options?: RedlockOptions) {
    this.clients = checkClients<RedisClient>(clients);
    this.quorum = quorumOf(this.clients.length);
    this.#settings = checkSettings(options);
    // Watch the connections from the start, so that a node already down is known before the first round.
    this.#watches = this.clients.map((client) => watchOf(client));
    this.#round = {
      owner: this,
      clients: this.clients,
      quorum: this.quorum,
      settings: this.#settings,
      client: (node) => this.#client(node),
      currentWatches: (nodes) => this.#currentWatches(nodes),
      observer: (phase, nodes) => this.#observer(phase, nodes),
      releaseAll: (leases, value, waitForAll, nodes) => this.#releaseAll(leases, value, waitForAll, nodes),
    };
  }

  /**
   * Acquires `resource` for `ttlMs`, retrying as configured; throws LockNotAcquiredError when it
   * gives up, and TokenSpaceExhaustedError at once (no retry) when the resource's counters reached 2^63 - 1.
   *
   * Given several resources (`["account:alice", "account:bob"]`), acquires all of them or none, as
   * one lease with a token for each (`lease.fences`, in the order given; PROTOCOL.md, "Sets"). Each
   * node grants the whole set or nothing, so two callers asking for overlapping sets in any order
   * never deadlock: one of them gets none of it and retries. Duplicates or an empty list are
   * InvalidArgumentError. On a Redis Cluster the set's keys must share a slot: resources share one
   * when their text up to the first `}` is the same, so start them with a common `{tag}` —
   * `{accounts}:alice`, `{accounts}:bob`; a set whose resources lie in different slots is refused
   * with InvalidArgumentError once a node says so (CROSSSLOT), with nothing left held.
   */
  async acquire(resource: Resources, ttlMs: number, options?: AcquireOptions): Promise<Lease> {
    const resources = checkedResources(resource);
    this.#checkTtl(ttlMs);
    const { retryCount, signal } = checkAcquireOptions(options, this.#settings.retryCount);
    return this.#acquire(resources, ttlMs, retryCount, signal);
  }

  #acquire(resources: readonly string[], ttlMs: number, retryCount: number, signal: AbortSignal | undefined): Promise<Lease> {
    return observed(
      { operation: "acquire", resources, ttlMs },
      () => this.#acquireRounds(resources, ttlMs, retryCount, signal),
      (lease) => ({ fences: leaseInternals.held(lease), holder: lease.holder, validUntil: lease.validUntil }),
    );
  }

  async #acquireRounds(resources: readonly string[], ttlMs: number, retryCount: number, signal: AbortSignal | undefined): Promise<Lease> {
    for (let attempt = 1; ; attempt++) {
      signal?.throwIfAborted();
      const result = await acquireRound(this.#round, resources, ttlMs);
      if (result instanceof Lease) return result;
      if (attempt > retryCount) throw new LockNotAcquiredError(resources[0] as string, attempt, result, resources);
      const delay = this.#settings.retryDelayMs + Math.random() * this.#settings.retryJitterMs;
      await sleep(delay, undefined, signal === undefined ? {} : { signal });
    }
  }

  /**
   * Runs `routine` under the lease, extending it ahead of expiry. If an extension cannot confirm a
   * majority (after `extensionAttempts` rounds, or at once when a majority answers that it no longer
   * holds the lease), `lease.signal` aborts with the failing nodes as reason, and using() rethrows
   * that LeaseLostError after the routine settles — resolved, or rejected with that loss or a store's
   * copy of it (which says `applied: "no"` of the one call it refused) — as its work may have run
   * unprotected. Any other error of the routine is passed on as it is.
   */
  async using<T>(resource: Resources, ttlMs: number, routine: (lease: Lease) => Promise<T>, options?: AcquireOptions): Promise<T> {
    const resources = checkedResources(resource);
    this.#checkTtl(ttlMs);
    if (typeof routine !== "function") throw new InvalidArgumentError("routine", "must be a function (lease) => Promise");
    const { retryCount, signal } = checkAcquireOptions(options, this.#settings.retryCount);
    const threshold = this.#extensionThreshold(ttlMs);
    const { extensionAttempts } = this.#settings;
    const lease = await this.#acquire(resources, ttlMs, retryCount, signal);
    let timer: NodeJS.Timeout | undefined;
    const schedule = (): void => {
      const wait = Math.max(0, lease.remainingMs - threshold);
      timer = setTimeout(() => void extendRound(), wait);
    };
    const extendRound = async (): Promise<void> => {
      for (let attempt = 1; attempt <= extensionAttempts && !lease.signal.aborted; attempt++) {
        try {
          await leaseInternals.tryExtend(lease, ttlMs);
          schedule();
          return;
        } catch (err) {
          const definitive =
            err instanceof LeaseLostError && err.nodes.filter((n) => n.reason === "not-held").length > this.clients.length - this.quorum;
          if (definitive || attempt === extensionAttempts || lease.remainingMs === 0) {
            leaseInternals.lose(lease, err instanceof LeaseLostError ? err : leaseLost(lease, "quorum-lost"));
            return;
          }
          // Spread the remaining attempts over part of the remaining validity, so that a short
          // blip does not use them all up at once, and none of them lands after expiry.
          await sleep(Math.min(this.#settings.retryDelayMs, lease.remainingMs / (2 * (extensionAttempts - attempt + 1))));
        }
      }
    };
    schedule();
    try {
      let value: T;
      try {
        value = await routine(lease);
      } catch (err) {
        const lost = lostWhileRunning(lease);
        // A store's copy of the loss (a LeaseLostError caused by it) says that the one call it refused
        // sent nothing; using() answers for the whole routine, which ran under the lease: the lease's own.
        throw lost !== undefined && (err === lost || (err instanceof LeaseLostError && err.cause === lost)) ? lost : err;
      }
      const lost = lostWhileRunning(lease);
      if (lost !== undefined) throw lost;
      return value;
    } finally {
      clearTimeout(timer);
      await lease.release();
    }
  }

  /** A TTL this Redlock can grant: at least MIN_TTL_MS, and leaving validity after its drift allowance (options.ts). */
  #checkTtl(ttlMs: unknown): asserts ttlMs is number {
    checkTtl(ttlMs, this.#settings.driftFactor);
  }

  /**
   * When using() extends: with this much validity left. A lease of `ttlMs` is never valid for longer
   * than `ttlMs` minus the drift allowance, so a threshold at or above that would extend back to back
   * and never wait; such a call is refused before acquiring. (#checkTtl has made that longest validity
   * positive, so the default, half of it, is always below it.)
   */
  #extensionThreshold(ttlMs: number): number {
    const longestValidity = ttlMs - driftMs(ttlMs, this.#settings.driftFactor);
    const configured = this.#settings.automaticExtensionThresholdMs;
    const threshold = configured ?? longestValidity / 2;
    if (threshold < longestValidity) return threshold;
    throw new InvalidArgumentError(
      "options.automaticExtensionThresholdMs",
      `${configured} ms leaves no time to wait between extensions: a lease of ${ttlMs} ms is valid for at most ${longestValidity} ms`,
    );
  }

  /**
   * Extends a lease that another process acquired and handed on as `{ resource, token, value,
   * validUntil? }` (a lease of several resources: `{ fences, value, validUntil? }`). The round counts only if a quorum confirms that it still holds `value` before the
   * lease's previous end — `held.validUntil` (epoch ms) when the caller knows it, as Lease.extend()
   * checks for itself; otherwise before `ttlMs` has passed, as if the lease had just been granted.
   * Past the previous end, the nodes that confirm may include ones that received the acquisition's
   * write late, after another client held a majority (PROTOCOL.md, "Gateway"): such a round, or a
   * `validUntil` already past, throws LeaseLostError (`expired`). Resolves with a Lease carrying the
   * new validity (extend()/release() work on it as usual). The token is not checked against the nodes
   * (they do not keep it per lease): it is carried along. A `held` that is a Lease known lost (released,
   * before or during the round) throws its own LeaseLostError, as its extend() would.
   */
  async extend(held: HeldLease, ttlMs: number): Promise<Lease> {
    const { fences, value, validUntil } = checkHeld(held);
    this.#checkTtl(ttlMs);
    const knownLoss = (): LeaseLostError | undefined => (held instanceof Lease ? held.lostReason : undefined);
    const lostBefore = knownLoss();
    if (lostBefore !== undefined) throw lostBefore;
    // Wall clock to monotonic once, here: the round's deadline is the previous end, or start + ttlMs.
    const previousMs = validUntil === undefined ? ttlMs : Math.min(ttlMs, validUntil - Date.now());
    const first = fences[0] as HeldFence;
    // Nothing is sent for a lease already past its end: nothing of this extend() was applied.
    if (previousMs <= 0) throw new LeaseLostError(first.resource, first.token, "expired", [], fences, { applied: "no" });
    const lease = new Lease(this, fences, value, previousMs);
    // The Lease handed in was released while the round ran: whatever the nodes answered (the release
    // may have reached them first, or deleted what the round had just extended), its reason wins. The
    // round's own Lease is lost with it at once, so that the round ends with that reason for the
    // observers too (extendLease), not as a loss of its own.
    const follow = (): void => {
      const loss = knownLoss();
      if (loss !== undefined) leaseInternals.lose(lease, loss);
    };
    if (held instanceof Lease) held.signal.addEventListener("abort", follow, { once: true });
    try {
      await lease.extend(ttlMs);
    } catch (err) {
      throw knownLoss() ?? err;
    } finally {
      if (held instanceof Lease) held.signal.removeEventListener("abort", follow);
    }
    const lostMeanwhile = knownLoss();
    if (lostMeanwhile !== undefined) {
      leaseInternals.lose(lease, lostMeanwhile);
      throw lostMeanwhile;
    }
    // As for acquire: a round that took longer than the TTL (minus drift) leaves no validity to hand out.
    const lost = lease.lostReason;
    if (lost !== undefined) throw lost;
    return lease;
  }

  /**
   * Releases a lease that another process acquired (see extend(held)): deletes the lease key on every
   * node where it still holds `value`, never a key holding another value. Idempotent. A `held` that is
   * a Lease is lost (`released`) from now on, as after its own release(); the deletes are still sent
   * with this Redlock's clients, each time: the Lease's own Redlock may have closed its clients, or
   * its earlier release() reached no node.
   */
  async release(held: HeldLease): Promise<void> {
    const { fences, value } = checkHeld(held);
    if (held instanceof Lease) leaseInternals.lose(held, "released");
    const resources = fences.map((f) => f.resource);
    await observed(
      { operation: "release", resources, fences },
      () => this.#releaseAll(leaseKeys(fences), value, false, this.#allNodes()),
      () => ({ holder: held instanceof Lease ? held.holder : undefined }),
    );
  }

  /** @internal LeaseOwner: extends on every node; resolves with the new validity and end, or throws LeaseLostError. */
  extendLease(lease: Lease, ttlMs: number): Promise<{ readonly validityMs: number; readonly validUntil: number }> {
    const fences = leaseInternals.held(lease);
    return observed(
      { operation: "extend", resources: lease.resources, fences, ttlMs },
      async () => {
        // Lost while the round ran (released, most often: the nodes then answer not-held, or confirm
        // what the release then deletes): the lease's own reason, the one its signal aborted with,
        // not what the nodes made of it — for the caller and for what observers see alike.
        let validityMs: number;
        try {
          validityMs = await this.#extendLease(lease, ttlMs);
        } catch (err) {
          throw (err instanceof LeaseLostError ? lease.lostReason : undefined) ?? err;
        }
        const lostMeanwhile = lease.lostReason;
        if (lostMeanwhile !== undefined) throw lostMeanwhile;
        return { validityMs, validUntil: Date.now() + validityMs };
      },
      (extended) => ({ fences, holder: lease.holder, validUntil: extended.validUntil }),
    );
  }

  async #extendLease(lease: Lease, ttlMs: number): Promise<number> {
    this.#checkTtl(ttlMs);
    const start = performance.now();
    const deadline = start + lease.remainingMs;
    let confirmed = 0;
    const call: ScriptCall = { script: SCRIPTS.extend, keys: leaseKeys(leaseInternals.held(lease)), args: [lease.value, ttlMs] };
    const replies = await fanOut(this.clients.length, this.#settings.nodeTimeoutMs, {
      send: (node) => sendScript(this.#client(node), call),
      retry: (node, err) => fallBack(this.#client(node), call, err),
      watches: this.#currentWatches(),
      // Not over before every node answered unless a quorum confirmed: the answers of the rest tell a
      // lost lease (a majority answers not-held; using() then gives up at once) from nodes that could
      // not be asked. A node known down answers at once (refused), so only a silent node makes it wait.
      decided: (reply) => reply.ok && reply.value === 1 && ++confirmed >= this.quorum,
      observe: this.#observer("extend"),
    });
    nodeEvents("extend", replies);
    const now = performance.now();
    // A majority confirmed after the old validity ended proves nothing: another client may have held it meanwhile.
    if (confirmed < this.quorum || now > deadline) {
      const reasons = failures(replies, (v, node) => (v === 1 ? undefined : { node, reason: "not-held" }));
      // The lease is not marked lost here: Lease.extend() does that, using() first retries (see Lease's #tryExtend).
      throw leaseLost(lease, now > deadline ? "expired" : "quorum-lost", reasons);
    }
    return Math.floor(ttlMs - (now - start) - driftMs(ttlMs, this.#settings.driftFactor));
  }

  /** @internal LeaseOwner: deletes this lease's value on every node. */
  async releaseLease(lease: Lease): Promise<void> {
    const fences = leaseInternals.held(lease);
    await observed(
      { operation: "release", resources: lease.resources, fences },
      () => this.#releaseAll(leaseKeys(fences), lease.value, false, this.#allNodes()),
      () => ({ holder: lease.holder }),
    );
  }

  /**
   * Release resolves once a majority answered (waiting for all would pay the slowest node's tail);
   * the rest complete in the background. After a failed acquire it waits for every node, so that a
   * loser has left nothing behind by the time acquire() rejects — except on nodes known down, which
   * get the release queued behind what they were sent before, and are not waited for.
   */
  async #releaseAll(leases: readonly string[], value: string, waitForAll: boolean, nodes: readonly number[]): Promise<void> {
    if (nodes.length === 0) return;
    const needed = waitForAll ? nodes.length : Math.min(this.quorum, nodes.length);
    let answered = 0;
    const call: ScriptCall = { script: SCRIPTS.release, keys: leases, args: [value] };
    const replies = await fanOut(nodes.length, this.#settings.nodeTimeoutMs, {
      send: (i) => sendScript(this.#client(nodes[i] as number), call),
      retry: (i, err) => fallBack(this.#client(nodes[i] as number), call, err),
      watches: this.#currentWatches(nodes),
      cleanup: true,
      decided: () => ++answered >= needed,
      observe: this.#observer("release", nodes),
    });
    nodeEvents("release", replies, nodes);
  }

  /**
   * The fan-out's observer for onNodeResult (a fan-out to `nodes` numbers them 0…; reported by their
   * index among the clients), or undefined without one: then nothing is timed.
   */
  #observer(phase: NodeResult["phase"], nodes?: readonly number[]): ((k: number, ms: number, failure?: NodeFailure) => void) | undefined {
    const report = this.#settings.onNodeResult;
    if (report === undefined) return undefined;
    return (k, ms, failure) => {
      const node = nodes?.[k] ?? k;
      try {
        // A fan-out reports only refused, timeout and error (quorum.ts): held and not-held are answers.
        report({ node, phase, ms, ...(failure && { failure: { ...failure, node } as NonNullable<NodeResult["failure"]> }) });
      } catch {
        // An observer's failure never changes what the lock does.
      }
    };
  }

  #allNodes(): number[] {
    return this.clients.map((_, node) => node);
  }

  #client(node: number): RedisClient {
    return this.clients[node] as RedisClient;
  }

  /** The nodes' watches (all nodes, or `nodes` in that order), watching again a client that ended and may have connected since. */
  #currentWatches(nodes?: readonly number[]): readonly (NodeWatch | undefined)[] {
    const watches = this.#watches;
    for (let node = 0; node < watches.length; node++) {
      const watch = watches[node];
      if (watch === undefined || watch.detached) watches[node] = watchOf(this.#client(node));
    }
    return nodes === undefined ? watches : nodes.map((node) => watches[node]);
  }
}

/** acquire()'s and using()'s first argument, checked (@fenced/fence's rules): one resource, or a set. */
function checkedResources(resource: unknown): string[] {
  if (Array.isArray(resource)) return checkResources(resource);
  assertResource(resource);
  return [resource];
}

/** The lease keys of a lease's resources, in its order. */
function leaseKeys(fences: readonly { readonly resource: string }[]): string[] {
  return fences.map((f) => resourceKeys(f.resource).lease);
}

/** The lease's LeaseLostError if it was lost (not released) while using() ran its routine: its `applied` is "unknown". */
function lostWhileRunning(lease: Lease): LeaseLostError | undefined {
  const reason: unknown = lease.signal.reason;
  return lease.signal.aborted && reason instanceof LeaseLostError && reason.kind !== "released" ? reason : undefined;
}
