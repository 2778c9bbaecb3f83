import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { LeaseLostError, LockNotAcquiredError, type NodeFailure } from "./errors.js";
import { resourceKeys } from "./keys.js";
import { Lease, type LeaseOwner } from "./lease.js";
import { AcquireTally, chooseToken, failures, fanOut, parseGrant, quorumOf, runScript, type Grant, type RedisClient } from "./quorum.js";
import { SCRIPTS } from "./scripts.js";

export interface RedlockOptions {
  /** Clock drift allowance as a fraction of the TTL (plus 2 ms); subtracted from the validity. Default 0.01. */
  readonly driftFactor?: number;
  /** Retries after the first attempt; Infinity retries until `signal` aborts. Default 10. */
  readonly retryCount?: number;
  /** Base delay between attempts. Default 200 ms. */
  readonly retryDelayMs?: number;
  /** Random extra delay in [0, retryJitterMs) so that contenders spread out. Default 100 ms. */
  readonly retryJitterMs?: number;
  /** How long one node may take to answer before it counts as failed for that round. Default 200 ms. */
  readonly nodeTimeoutMs?: number;
  /** using(): extend when this much validity remains. Default: half the TTL. */
  readonly automaticExtensionThresholdMs?: number;
  /** using(): extension rounds tried before the lease is declared lost. Default 3. */
  readonly extensionAttempts?: number;
}

/**
 * What identifies a lease on the nodes: enough for a process other than the one that acquired it
 * (for example another instance of a stateless HTTP gateway) to extend or release it. `value` is the
 * lease's random secret (`Lease.value`): whoever knows it can extend or release that lease, nothing more.
 */
export interface HeldLease {
  readonly resource: string;
  readonly token: bigint;
  readonly value: string;
}

export interface AcquireOptions {
  readonly retryCount?: number;
  /** Abandons the retry loop (not an attempt in flight). */
  readonly signal?: AbortSignal;
}

const MAX_RESOURCE_LENGTH = 512;
const MAX_TTL_MS = 2 ** 31 - 1;

function assertResource(resource: unknown): asserts resource is string {
  if (typeof resource !== "string") throw new TypeError(`resource must be a string, got ${typeof resource}`);
  if (resource.length === 0) throw new RangeError("resource must not be empty");
  if (resource.length > MAX_RESOURCE_LENGTH) throw new RangeError(`resource must be at most ${MAX_RESOURCE_LENGTH} characters, got ${resource.length}`);
}

// What #attempt generates; anything else cannot be a lease value and is refused before any I/O.
const LEASE_VALUE = /^[0-9a-f]{32}$/;

function assertHeld(held: unknown): asserts held is HeldLease {
  if (typeof held !== "object" || held === null) throw new TypeError("held must be an object { resource, token, value }");
  const { resource, token, value } = held as Record<string, unknown>;
  assertResource(resource);
  if (typeof token !== "bigint") throw new TypeError(`token must be a bigint, got ${typeof token}`);
  if (token < 0n) throw new RangeError(`token must not be negative, got ${token}`);
  if (typeof value !== "string") throw new TypeError(`value must be a string, got ${typeof value}`);
  if (!LEASE_VALUE.test(value)) throw new RangeError("value is not a lease value (32 lowercase hex digits)");
}

function assertTtl(ttlMs: unknown): asserts ttlMs is number {
  if (typeof ttlMs !== "number" || !Number.isInteger(ttlMs)) throw new TypeError(`ttlMs must be an integer number of milliseconds, got ${String(ttlMs)}`);
  if (ttlMs <= 0 || ttlMs > MAX_TTL_MS) throw new RangeError(`ttlMs must be between 1 and ${MAX_TTL_MS}, got ${ttlMs}`);
}

function assertNonNegative(name: string, value: number, allowInfinity = false): void {
  if (typeof value !== "number" || Number.isNaN(value) || value < 0 || (!allowInfinity && !Number.isFinite(value))) {
    throw new RangeError(`${name} must be a non-negative number, got ${String(value)}`);
  }
}

/**
 * Redlock over N independent Redis nodes, with fencing tokens that are unique per resource and
 * strictly increasing across acquisitions (PROTOCOL.md states the invariant and why it holds).
 */
export class Redlock implements LeaseOwner {
  readonly clients: readonly RedisClient[];
  readonly quorum: number;
  readonly #driftFactor: number;
  readonly #retryCount: number;
  readonly #retryDelayMs: number;
  readonly #retryJitterMs: number;
  readonly #nodeTimeoutMs: number;
  readonly #extensionThresholdMs: number | undefined;
  readonly #extensionAttempts: number;

  constructor(clients: readonly RedisClient[], options: RedlockOptions = {}) {
    if (typeof clients !== "object" || clients === null || !(clients.length >= 1)) throw new RangeError("Redlock needs at least one Redis client");
    this.clients = [...clients];
    this.quorum = quorumOf(clients.length);
    this.#driftFactor = options.driftFactor ?? 0.01;
    this.#retryCount = options.retryCount ?? 10;
    this.#retryDelayMs = options.retryDelayMs ?? 200;
    this.#retryJitterMs = options.retryJitterMs ?? 100;
    this.#nodeTimeoutMs = options.nodeTimeoutMs ?? 200;
    this.#extensionThresholdMs = options.automaticExtensionThresholdMs;
    this.#extensionAttempts = options.extensionAttempts ?? 3;
    assertNonNegative("driftFactor", this.#driftFactor);
    assertNonNegative("retryCount", this.#retryCount, true);
    assertNonNegative("retryDelayMs", this.#retryDelayMs);
    assertNonNegative("retryJitterMs", this.#retryJitterMs);
    assertNonNegative("nodeTimeoutMs", this.#nodeTimeoutMs);
    if (this.#nodeTimeoutMs === 0) throw new RangeError("nodeTimeoutMs must be positive");
    if (!Number.isInteger(this.#extensionAttempts) || this.#extensionAttempts < 1) throw new RangeError("extensionAttempts must be a positive integer");
    if (this.#extensionThresholdMs !== undefined) assertNonNegative("automaticExtensionThresholdMs", this.#extensionThresholdMs);
  }

  /** Acquires `resource` for `ttlMs`, retrying as configured; throws LockNotAcquiredError when it gives up. */
  async acquire(resource: string, ttlMs: number, options: AcquireOptions = {}): Promise<Lease> {
    assertResource(resource);
    assertTtl(ttlMs);
    const retries = options.retryCount ?? this.#retryCount;
    assertNonNegative("retryCount", retries, true);
    let lastFailures: readonly NodeFailure[] = [];
    for (let attempt = 1; ; attempt++) {
      options.signal?.throwIfAborted();
      const result = await this.#attempt(resource, ttlMs);
      if (result instanceof Lease) return result;
      lastFailures = result;
      if (attempt > retries) throw new LockNotAcquiredError(resource, attempt, lastFailures);
      const delay = this.#retryDelayMs + Math.random() * this.#retryJitterMs;
      await sleep(delay, undefined, options.signal === undefined ? {} : { signal: options.signal });
    }
  }

  /**
   * Runs `routine` under the lease, extending it ahead of expiry. If an extension cannot confirm a
   * majority (after `extensionAttempts` rounds, or at once when a majority answers that it no longer
   * holds the lease), `lease.signal` aborts with the failing nodes as reason, and using() rethrows
   * that LeaseLostError after the routine settles: its work may have run unprotected.
   */
  async using<T>(resource: string, ttlMs: number, routine: (lease: Lease) => Promise<T>, options: AcquireOptions = {}): Promise<T> {
    const lease = await this.acquire(resource, ttlMs, options);
    const threshold = this.#extensionThresholdMs ?? ttlMs / 2;
    let timer: NodeJS.Timeout | undefined;
    const schedule = (): void => {
      const wait = Math.max(0, lease.remainingMs - threshold);
      timer = setTimeout(() => void extendRound(), wait);
    };
    const extendRound = async (): Promise<void> => {
      for (let attempt = 1; attempt <= this.#extensionAttempts && !lease.signal.aborted; attempt++) {
        try {
          await lease.tryExtend(ttlMs);
          schedule();
          return;
        } catch (err) {
          const definitive = err instanceof LeaseLostError && err.nodes.filter((n) => n.reason === "not-held").length > this.clients.length - this.quorum;
          if (definitive || attempt === this.#extensionAttempts || lease.remainingMs === 0) {
            lease.lose(err instanceof LeaseLostError ? err : new LeaseLostError(resource, lease.token, "quorum-lost"));
            return;
          }
          // Spread the remaining attempts over part of the remaining validity, so that a short
          // blip does not use them all up at once, and none of them lands after expiry.
          await sleep(Math.min(this.#retryDelayMs, lease.remainingMs / (2 * (this.#extensionAttempts - attempt + 1))));
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

  /**
   * Extends a lease that another process acquired and handed on as `{ resource, token, value }`.
   * Nothing about its previous validity is known here, so the round is judged as if the lease had
   * just been granted for `ttlMs`: it counts only if a quorum confirms, before that much time has
   * passed, that it still holds `value`. The caller must extend before the lease's validUntil, as
   * Lease.extend() checks for itself: past it, the nodes that confirm may include ones that received
   * the acquisition's write late, after another client held a majority (PROTOCOL.md, "Gateway").
   * Resolves with a Lease carrying the new validity (extend()/release() work on it as usual); throws
   * LeaseLostError otherwise. The token is not checked against the nodes (they do not keep it per
   * lease): it is carried along.
   */
  async extend(held: HeldLease, ttlMs: number): Promise<Lease> {
    assertHeld(held);
    assertTtl(ttlMs);
    const lease = new Lease(this, held.resource, held.token, held.value, ttlMs);
    await lease.extend(ttlMs);
    // As for acquire: a round that took longer than the TTL (minus drift) leaves no validity to hand out.
    const lost = lease.lostReason;
    if (lost !== undefined) throw lost;
    return lease;
  }

  /**
   * Releases a lease that another process acquired (see extend(held)): deletes the lease key on every
   * node where it still holds `value`, never a key holding another value. Idempotent.
   */
  async release(held: HeldLease): Promise<void> {
    assertHeld(held);
    await this.#releaseAll(resourceKeys(held.resource).lease, held.value, false);
  }

  /** One acquisition round: grant + counter on all nodes, publish if needed, then the validity. */
  async #attempt(resource: string, ttlMs: number): Promise<Lease | NodeFailure[]> {
    const keys = resourceKeys(resource);
    const value = randomBytes(16).toString("hex");
    const start = performance.now();
    const tally = new AcquireTally(this.clients.length, this.quorum);
    // Once the fan-out has resolved, a node that answers NOSCRIPT must not get the acquire again
    // (see runScript): the release that follows may already have run there.
    let fanningOut = true;
    const stillWanted = (): boolean => fanningOut;
    const replies = await fanOut(
      this.clients.length,
      (node) => runScript(this.#client(node), SCRIPTS.acquire, [keys.lease, keys.counter], [value, ttlMs], stillWanted).then(parseGrant),
      this.#nodeTimeoutMs,
      (reply) => tally.add(reply),
    );
    fanningOut = false;
    const choice = chooseToken(replies, this.quorum);
    let counted = choice?.counted.length ?? 0;
    if (choice !== undefined && counted < this.quorum && choice.behind.length > 0) {
      counted += await this.#publish(keys.lease, keys.counter, value, choice.token, choice.behind, this.quorum - counted);
    }
    if (choice !== undefined && counted >= this.quorum) {
      // The token is settled; only now is the validity computed, with the monotonic clock.
      const elapsed = performance.now() - start;
      const validityMs = Math.floor(ttlMs - elapsed - (ttlMs * this.#driftFactor + 2));
      if (validityMs > 0) return new Lease(this, resource, choice.token, value, validityMs);
    }
    // Not acquired: release everywhere, including nodes that timed out (their grant may still land).
    await this.#releaseAll(keys.lease, value, true);
    return failures(replies, (g: Grant, node) => (g.granted ? undefined : { node, reason: "held" }));
  }

  /** Raises the counters of granting nodes that are behind to `token`; resolves with how many now count. */
  async #publish(lease: string, counter: string, value: string, token: bigint, nodes: readonly number[], needed: number): Promise<number> {
    let moved = 0;
    await fanOut(
      nodes.length,
      (i) => runScript(this.#client(nodes[i] as number), SCRIPTS.publish, [lease, counter], [value, token.toString()]),
      this.#nodeTimeoutMs,
      (reply) => reply.ok && reply.value === 1 && ++moved >= needed,
    );
    return moved;
  }

  /** @internal LeaseOwner: extends on every node; resolves with the new validity or throws LeaseLostError. */
  async extendLease(lease: Lease, ttlMs: number): Promise<number> {
    assertTtl(ttlMs);
    const keys = resourceKeys(lease.resource);
    const start = performance.now();
    const deadline = start + lease.remainingMs;
    let confirmed = 0;
    const replies = await fanOut(
      this.clients.length,
      (node) => runScript(this.#client(node), SCRIPTS.extend, [keys.lease], [lease.value, ttlMs]),
      this.#nodeTimeoutMs,
      (reply) => reply.ok && reply.value === 1 && ++confirmed >= this.quorum,
    );
    const now = performance.now();
    // A majority confirmed after the old validity ended proves nothing: another client may have held it meanwhile.
    if (confirmed < this.quorum || now > deadline) {
      const reasons = failures(replies, (v, node) => (v === 1 ? undefined : { node, reason: "not-held" }));
      // Not lease.lose() here: Lease.extend() does that, using() first retries (see Lease.tryExtend).
      throw new LeaseLostError(lease.resource, lease.token, now > deadline ? "expired" : "quorum-lost", reasons);
    }
    return Math.floor(ttlMs - (now - start) - (ttlMs * this.#driftFactor + 2));
  }

  /** @internal LeaseOwner: deletes this lease's value on every node. */
  async releaseLease(lease: Lease): Promise<void> {
    await this.#releaseAll(resourceKeys(lease.resource).lease, lease.value, false);
  }

  /**
   * Release resolves once a majority answered (waiting for all would pay the slowest node's tail);
   * the rest complete in the background. After a failed acquire it waits for every node, so that a
   * loser has left nothing behind by the time acquire() rejects.
   */
  async #releaseAll(lease: string, value: string, waitForAll: boolean): Promise<void> {
    const needed = waitForAll ? this.clients.length : this.quorum;
    let answered = 0;
    await fanOut(
      this.clients.length,
      (node) => runScript(this.#client(node), SCRIPTS.release, [lease], [value]),
      this.#nodeTimeoutMs,
      () => ++answered >= needed,
    );
  }

  #client(node: number): RedisClient {
    return this.clients[node] as RedisClient;
  }
}
