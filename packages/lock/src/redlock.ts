import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { assertResource, InvalidArgumentError } from "@fenced/fence";
import type { RedisClient } from "./client.js";
import { LeaseLostError, LockNotAcquiredError, TokenSpaceExhaustedError, type NodeFailure } from "./errors.js";
import { resourceKeys } from "./keys.js";
import { Lease, leaseInternals } from "./lease.js";
import { newLeaseValue } from "./lease-value.js";
import { watchOf, type NodeWatch } from "./node-watch.js";
import {
  checkAcquireOptions,
  checkClients,
  checkHeld,
  checkSettings,
  checkTtl,
  driftMs,
  type AcquireOptions,
  type HeldLease,
  type RedlockOptions,
  type Settings,
} from "./options.js";
import {
  AcquireTally,
  ceilingReached,
  chooseToken,
  evalSha,
  failures,
  fallBack,
  fanOut,
  parseGrant,
  quorumOf,
  type Grant,
  type ScriptCall,
} from "./quorum.js";
import { SCRIPTS } from "./scripts.js";

export type { AcquireOptions, HeldLease, RedlockOptions } from "./options.js";

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

  /** One client per independent node (a Cluster client counts as one node). Throws InvalidArgumentError on bad input. */
  constructor(clients: readonly RedisClient[], options?: RedlockOptions) {
    this.clients = checkClients<RedisClient>(clients);
    this.quorum = quorumOf(this.clients.length);
    this.#settings = checkSettings(options);
    // Watch the connections from the start, so that a node already down is known before the first round.
    this.#watches = this.clients.map((client) => watchOf(client));
  }

  /**
   * Acquires `resource` for `ttlMs`, retrying as configured; throws LockNotAcquiredError when it
   * gives up, and TokenSpaceExhaustedError at once (no retry) when the resource's counters reached 2^63 - 1.
   */
  async acquire(resource: string, ttlMs: number, options?: AcquireOptions): Promise<Lease> {
    assertResource(resource);
    this.#checkTtl(ttlMs);
    const { retryCount, signal } = checkAcquireOptions(options, this.#settings.retryCount);
    return this.#acquire(resource, ttlMs, retryCount, signal);
  }

  async #acquire(resource: string, ttlMs: number, retryCount: number, signal: AbortSignal | undefined): Promise<Lease> {
    for (let attempt = 1; ; attempt++) {
      signal?.throwIfAborted();
      const result = await this.#attempt(resource, ttlMs);
      if (result instanceof Lease) return result;
      if (attempt > retryCount) throw new LockNotAcquiredError(resource, attempt, result);
      const delay = this.#settings.retryDelayMs + Math.random() * this.#settings.retryJitterMs;
      await sleep(delay, undefined, signal === undefined ? {} : { signal });
    }
  }

  /**
   * Runs `routine` under the lease, extending it ahead of expiry. If an extension cannot confirm a
   * majority (after `extensionAttempts` rounds, or at once when a majority answers that it no longer
   * holds the lease), `lease.signal` aborts with the failing nodes as reason, and using() rethrows
   * that LeaseLostError after the routine settles: its work may have run unprotected.
   */
  async using<T>(resource: string, ttlMs: number, routine: (lease: Lease) => Promise<T>, options?: AcquireOptions): Promise<T> {
    assertResource(resource);
    this.#checkTtl(ttlMs);
    if (typeof routine !== "function") throw new InvalidArgumentError("routine", "must be a function (lease) => Promise");
    const { retryCount, signal } = checkAcquireOptions(options, this.#settings.retryCount);
    const threshold = this.#extensionThreshold(ttlMs);
    const { extensionAttempts } = this.#settings;
    const lease = await this.#acquire(resource, ttlMs, retryCount, signal);
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
            leaseInternals.lose(lease, err instanceof LeaseLostError ? err : new LeaseLostError(resource, lease.token, "quorum-lost"));
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
      const value = await routine(lease);
      const reason: unknown = lease.signal.reason;
      if (lease.signal.aborted && reason instanceof LeaseLostError && reason.kind !== "released") throw reason;
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
   * validUntil? }`. The round counts only if a quorum confirms that it still holds `value` before the
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
    const { resource, token, value, validUntil } = checkHeld(held);
    this.#checkTtl(ttlMs);
    const knownLoss = (): LeaseLostError | undefined => (held instanceof Lease ? held.lostReason : undefined);
    const lostBefore = knownLoss();
    if (lostBefore !== undefined) throw lostBefore;
    // Wall clock to monotonic once, here: the round's deadline is the previous end, or start + ttlMs.
    const previousMs = validUntil === undefined ? ttlMs : Math.min(ttlMs, validUntil - Date.now());
    if (previousMs <= 0) throw new LeaseLostError(resource, token, "expired");
    const lease = new Lease(this, resource, token, value, previousMs);
    // The Lease handed in was released while the round ran: whatever the nodes answered (the release
    // may have reached them first, or deleted what the round had just extended), its reason wins.
    try {
      await lease.extend(ttlMs);
    } catch (err) {
      throw knownLoss() ?? err;
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
    const { resource, value } = checkHeld(held);
    if (held instanceof Lease) leaseInternals.lose(held, "released");
    await this.#releaseAll(resourceKeys(resource).lease, value, false, this.#allNodes());
  }

  /** One acquisition round: grant + counter on all nodes, publish if needed, then the validity. */
  async #attempt(resource: string, ttlMs: number): Promise<Lease | NodeFailure[]> {
    const keys = resourceKeys(resource);
    const value = newLeaseValue();
    const start = performance.now();
    const tally = new AcquireTally(this.clients.length, this.quorum);
    // Once the fan-out has resolved, a node that answers NOSCRIPT must not get the acquire again
    // (see fallBack): the release that follows may already have run there.
    let fanningOut = true;
    const stillWanted = (): boolean => fanningOut;
    const call: ScriptCall = { script: SCRIPTS.acquire, keys: [keys.lease, keys.counter], args: [value, ttlMs] };
    const replies = await fanOut(this.clients.length, this.#settings.nodeTimeoutMs, {
      send: (node) => evalSha(this.#client(node), call),
      retry: (node, err) => fallBack(this.#client(node), call, err, stillWanted),
      watches: this.#currentWatches(),
      parse: parseGrant,
      decided: (reply) => tally.add(reply),
    });
    fanningOut = false;
    // The nodes this attempt sent ACQUIRE to: the only ones it can have left a lease key on.
    const reached = replies.flatMap((reply, node) => (!reply.ok && reply.unsent === true ? [] : [node]));
    const choice = chooseToken(replies, this.quorum);
    const ceiling = ceilingReached(replies, choice, this.quorum);
    if (ceiling !== undefined) {
      // Never ask any node for a token past 2^63 - 1; leave nothing behind, then stop (retrying cannot help).
      await this.#releaseAll(keys.lease, value, true, reached);
      throw new TokenSpaceExhaustedError(resource, ceiling);
    }
    let counted = choice?.counted.length ?? 0;
    if (choice !== undefined && counted < this.quorum && choice.behind.length > 0) {
      counted += await this.#publish(keys.lease, keys.counter, value, choice.token, choice.behind, this.quorum - counted);
    }
    if (choice !== undefined && counted >= this.quorum) {
      // The token is settled; only now is the validity computed, with the monotonic clock.
      const elapsed = performance.now() - start;
      const validityMs = Math.floor(ttlMs - elapsed - driftMs(ttlMs, this.#settings.driftFactor));
      if (validityMs > 0) return new Lease(this, resource, choice.token, value, validityMs);
    }
    // Not acquired: release on every node it sent to, including those that timed out or went down
    // meanwhile (their grant may still land; the release is queued behind it).
    await this.#releaseAll(keys.lease, value, true, reached);
    return failures(replies, (g: Grant, node) => (g.granted ? undefined : { node, reason: "held" }));
  }

  /** Raises the counters of granting nodes that are behind to `token`; resolves with how many now count. */
  async #publish(lease: string, counter: string, value: string, token: bigint, nodes: readonly number[], needed: number): Promise<number> {
    let moved = 0;
    let missed = 0;
    const call: ScriptCall = { script: SCRIPTS.publish, keys: [lease, counter], args: [value, token.toString()] };
    await fanOut(nodes.length, this.#settings.nodeTimeoutMs, {
      send: (i) => evalSha(this.#client(nodes[i] as number), call),
      retry: (i, err) => fallBack(this.#client(nodes[i] as number), call, err),
      watches: this.#currentWatches(nodes),
      // Over once enough moved, or once so many did not that `needed` cannot be reached.
      decided: (reply) => (reply.ok && reply.value === 1 ? ++moved >= needed : ++missed > nodes.length - needed),
    });
    return moved;
  }

  /** @internal LeaseOwner: extends on every node; resolves with the new validity or throws LeaseLostError. */
  async extendLease(lease: Lease, ttlMs: number): Promise<number> {
    this.#checkTtl(ttlMs);
    const keys = resourceKeys(lease.resource);
    const start = performance.now();
    const deadline = start + lease.remainingMs;
    let confirmed = 0;
    const call: ScriptCall = { script: SCRIPTS.extend, keys: [keys.lease], args: [lease.value, ttlMs] };
    const replies = await fanOut(this.clients.length, this.#settings.nodeTimeoutMs, {
      send: (node) => evalSha(this.#client(node), call),
      retry: (node, err) => fallBack(this.#client(node), call, err),
      watches: this.#currentWatches(),
      // Not over before every node answered unless a quorum confirmed: the answers of the rest tell a
      // lost lease (a majority answers not-held; using() then gives up at once) from nodes that could
      // not be asked. A node known down answers at once (refused), so only a silent node makes it wait.
      decided: (reply) => reply.ok && reply.value === 1 && ++confirmed >= this.quorum,
    });
    const now = performance.now();
    // A majority confirmed after the old validity ended proves nothing: another client may have held it meanwhile.
    if (confirmed < this.quorum || now > deadline) {
      const reasons = failures(replies, (v, node) => (v === 1 ? undefined : { node, reason: "not-held" }));
      // The lease is not marked lost here: Lease.extend() does that, using() first retries (see Lease's #tryExtend).
      throw new LeaseLostError(lease.resource, lease.token, now > deadline ? "expired" : "quorum-lost", reasons);
    }
    return Math.floor(ttlMs - (now - start) - driftMs(ttlMs, this.#settings.driftFactor));
  }

  /** @internal LeaseOwner: deletes this lease's value on every node. */
  async releaseLease(lease: Lease): Promise<void> {
    await this.#releaseAll(resourceKeys(lease.resource).lease, lease.value, false, this.#allNodes());
  }

  /**
   * Release resolves once a majority answered (waiting for all would pay the slowest node's tail);
   * the rest complete in the background. After a failed acquire it waits for every node, so that a
   * loser has left nothing behind by the time acquire() rejects — except on nodes known down, which
   * get the release queued behind what they were sent before, and are not waited for.
   */
  async #releaseAll(lease: string, value: string, waitForAll: boolean, nodes: readonly number[]): Promise<void> {
    if (nodes.length === 0) return;
    const needed = waitForAll ? nodes.length : Math.min(this.quorum, nodes.length);
    let answered = 0;
    const call: ScriptCall = { script: SCRIPTS.release, keys: [lease], args: [value] };
    await fanOut(nodes.length, this.#settings.nodeTimeoutMs, {
      send: (i) => evalSha(this.#client(nodes[i] as number), call),
      retry: (i, err) => fallBack(this.#client(nodes[i] as number), call, err),
      watches: this.#currentWatches(nodes),
      cleanup: true,
      decided: () => ++answered >= needed,
    });
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
