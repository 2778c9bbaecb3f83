// The lease routes' calls into the lock and the stores (leases.ts holds the routes): acquiring with
// retries and a deadline, fence-on-acquire, extending a lease a lease id names, releasing one nobody
// will use. With leases.ts, the only gateway module that imports @fenced/lock.
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { LeaseLostError, LockNotAcquiredError, TokenSpaceExhaustedError, type Lease, type Redlock } from "@fenced/lock";
import type { NodeFailure } from "@fenced/lock/internal";
import type { FenceSet } from "@fenced/store/internal";
import type { FenceCredentials } from "../auth/credentials.js";
import type { LeaseIdParts } from "../auth/lease-id.js";
import type { Family } from "../stores/registration.js";
import type { RouteContext } from "./context.js";
import { PROBLEM_OF_CODE } from "../problems/kinds.js";
import { HttpProblem } from "../problems/problem.js";

/** Why a node did not count that means it is down or unreachable, not that the lock is held. */
const UNREACHABLE: ReadonlySet<string> = new Set(["error", "timeout", "refused"]);

/** Raises one store's ratchets to a lease's fences (the store's register()). */
export interface Registrar {
  readonly store: Family;
  /**
   * The lease itself (its fences, one per resource): the store refuses, before any I/O, a lease that
   * knows it has ended. `signal` aborts when the client has gone: the lease will be released, its
   * registration is moot.
   */
  register(lease: FenceSet, signal: AbortSignal): Promise<void>;
}

/** What the lease routes share: the gateway's context, its fence keys, the lock and the stores to register with. */
export interface Leases {
  readonly ctx: RouteContext;
  readonly credentials: FenceCredentials;
  readonly redlock: Redlock;
  readonly registrars: readonly Registrar[];
  readonly retry: { readonly count: number; readonly delayMs: number; readonly jitterMs: number; readonly attemptMs: number };
  readonly acquireTimeoutMs: number;
}

/**
 * The lock's error as an answer's detail: each node by index and reason (and code), never the
 * client's message, which names the node's address (any API key holder reads the answer). The
 * whole message goes to the log when a node failed rather than refused (held, not-held): that is
 * where an operator looks for the address.
 */
function publicDetail(ctx: RouteContext, err: LockNotAcquiredError | LeaseLostError, what: string): string {
  const nodes = err.nodes.map(nodeOutcome);
  if (err.nodes.some((n) => UNREACHABLE.has(n.reason))) ctx.logger.info({ err: { message: err.message, code: err.code } }, what);
  return nodes.length === 0 ? what : `${what}: ${nodes.join("; ")}`;
}

/** A node's failure in an answer: its index and reason (and code), never its address. */
function nodeOutcome(n: NodeFailure): string {
  return `node ${n.node}: ${n.reason}${"code" in n && n.code !== undefined ? ` ${n.code}` : ""}`;
}

/**
 * The lock without a quorum, as an answer's detail and so the request's log line: every node's
 * outcome in the lock's last round, by index — its failure, or `answered` for one that counted.
 */
function quorumLost(err: LockNotAcquiredError | LeaseLostError, what: string, nodeCount: number): string {
  const nodes = Array.from({ length: nodeCount }, (_, node) => {
    const failure = err.nodes.find((n) => n.node === node);
    return failure === undefined ? `node ${node}: answered` : nodeOutcome(failure);
  });
  return `${what}: ${nodes.join("; ")}`;
}

function lostWhat(resources: readonly string[], err: LeaseLostError): string {
  return `lease on ${resources.map((r) => JSON.stringify(r)).join(", ")} lost: ${err.kind}`;
}

/** The problem extensions that name what a lease request asked for: its (first) resource, and a set's every resource. */
function asked(resources: readonly string[]): { resource: string; resources?: string[] } {
  const resource = resources[0] as string;
  return resources.length === 1 ? { resource } : { resource, resources: [...resources] };
}

/**
 * acquire() and, if asked, registerEverywhere(), for a client that may leave meanwhile. A lease
 * granted (or registered) after the client has gone is released at once: nobody holds its lease id,
 * and it would keep its resources locked for its whole TTL. undefined when the client has gone.
 */
export async function grant(
  leases: Leases,
  resources: readonly string[],
  ttlMs: number,
  register: boolean,
  gone: AbortSignal,
): Promise<Lease | undefined> {
  let lease: Lease;
  try {
    lease = await acquire(leases, resources, ttlMs, gone);
  } catch (err) {
    // Stopped between attempts (an attempt in flight still ends, and is looked at below).
    if (gone.aborted) return undefined;
    throw err;
  }
  if (register) {
    try {
      await registerEverywhere(leases, lease, gone);
    } catch (err) {
      // registerEverywhere released it.
      if (!gone.aborted) throw err;
      leases.ctx.metrics.leaseAbandoned();
      return undefined;
    }
  }
  if (!gone.aborted) return lease;
  await abandon(leases, lease, "the client left before the lease was answered");
  return undefined;
}

/**
 * Releases a lease whose client will never learn its id: it left before the answer (grant()), or as
 * the answer was being written (the route, when the answer did not finish).
 */
export async function abandon(leases: Leases, lease: Lease, why: string): Promise<void> {
  await releaseQuietly(leases, lease, why);
  leases.ctx.metrics.leaseAbandoned();
}

/** Releases a lease nobody will use; a failure is logged (the lease then ends with its TTL), never thrown. */
async function releaseQuietly({ ctx }: Leases, lease: Lease, why: string): Promise<void> {
  try {
    await ctx.metrics.time("leases", "release", () => lease.release());
    ctx.logger.info({ resources: lease.resources, token: lease.token.toString() }, `lease released: ${why}`);
  } catch (err) {
    ctx.logger.warn(
      { err, resources: lease.resources, validUntil: lease.validUntil },
      `could not release a lease (${why}); it ends with its TTL`,
    );
  }
}

/**
 * Takes the lock on every resource (all or none), or answers why not: a resource's tokens are used
 * up, the lock is down (no quorum possible), or a resource is held. Bounded: a lock that cannot reach
 * a quorum answers after one attempt (retrying within this request cannot help; Retry-After tells the
 * client when to ask again), and a held lock is retried only while another attempt can end before
 * acquireTimeoutMs.
 */
async function acquire(
  { ctx, redlock, retry, acquireTimeoutMs }: Leases,
  resources: readonly string[],
  ttlMs: number,
  signal: AbortSignal,
): Promise<Lease> {
  const deadline = performance.now() + acquireTimeoutMs;
  for (let attempt = 0; ; attempt++) {
    try {
      // The signal stops the loop between attempts; an attempt in flight runs to its end.
      return await ctx.metrics.time("leases", "acquire", () => redlock.acquire(resources, ttlMs, { retryCount: 0, signal }));
    } catch (err) {
      if (err instanceof TokenSpaceExhaustedError)
        throw new HttpProblem(PROBLEM_OF_CODE[err.code], err.message, { resource: err.resource });
      if (!(err instanceof LockNotAcquiredError)) throw err;
      // So many nodes failed or timed out that no quorum was possible: the lock is down, not busy.
      const unreachable = err.nodes.filter((n) => UNREACHABLE.has(n.reason)).length;
      if (unreachable > redlock.clients.length - redlock.quorum)
        throw new HttpProblem("unavailable", quorumLost(err, "too few lock nodes answered", redlock.clients.length), {
          resource: resources[0],
        });
      const delay = retry.delayMs + Math.random() * retry.jitterMs;
      if (attempt >= retry.count || performance.now() + delay + retry.attemptMs > deadline) {
        // Contention (held elsewhere, or a round lost to a concurrent one): worth retrying later.
        ctx.metrics.lease("refused");
        const detail = publicDetail(
          ctx,
          err,
          `could not acquire ${resources.map((r) => JSON.stringify(r)).join(", ")} after ${attempt + 1} attempt(s)`,
        );
        throw new HttpProblem(PROBLEM_OF_CODE[err.code], detail, asked(resources));
      }
      await sleep(delay, undefined, { signal });
    }
  }
}

/**
 * Fence-on-acquire: every older holder of any of the lease's resources is refused by every store
 * from now on, also on keys this lease never writes. A store that has seen a higher token (the
 * lock's counters are behind it) refuses the registration: the lease is useless for writing, so it
 * is released at once.
 */
async function registerEverywhere(leases: Leases, lease: Lease, signal: AbortSignal): Promise<void> {
  const { ctx, registrars } = leases;
  try {
    await Promise.all(registrars.map((r) => ctx.metrics.time(r.store, "register", () => r.register(lease, signal))));
    // A registration that outlasted the lease (a store slow to answer): its credentials would be
    // answered already ended. The ratchets it raised refuse only holders older than its tokens.
    const lost = lease.lostReason;
    if (lost !== undefined) throw lost;
  } catch (err) {
    const why = signal.aborted
      ? "the client left during its registration"
      : err instanceof LeaseLostError
        ? "it ended before its registration did"
        : "its registration failed";
    await releaseQuietly(leases, lease, why);
    // The lease ran out before every store registered it (a store refuses a lease it knows ended), or while they did.
    if (err instanceof LeaseLostError) {
      ctx.metrics.leaseLost(err.kind);
      throw new HttpProblem(PROBLEM_OF_CODE[err.code], publicDetail(ctx, err, lostWhat(lease.resources, err)), {
        resource: lease.resource,
        token: lease.token.toString(),
        kind: err.kind,
      });
    }
    throw err;
  }
}

/**
 * Extends the lease a lease id names (every resource of it, or none), or answers that it is lost, or
 * that too few nodes answered to tell.
 */
export async function extend({ ctx, redlock }: Leases, held: LeaseIdParts, ttlMs: number): Promise<Lease> {
  const first = held.fences[0] as LeaseIdParts["fences"][number];
  try {
    // Confirmations count only before the id's validUntil (PROTOCOL.md, "Lease ids"); one already
    // past is `expired` without asking the lock.
    return await ctx.metrics.time("leases", "extend", () => redlock.extend(held, ttlMs));
  } catch (err) {
    if (!(err instanceof LeaseLostError)) throw err;
    const notHeld = err.nodes.filter((n) => n.reason === "not-held").length;
    // Lost for certain: it expired, or a majority answered that they no longer hold it. Otherwise
    // too few nodes answered to tell: the lease may still be alive, and a retry may confirm it.
    if (err.kind === "expired" || notHeld > redlock.clients.length - redlock.quorum) {
      ctx.metrics.leaseLost(err.kind);
      const resources = held.fences.map((f) => f.resource);
      throw new HttpProblem(PROBLEM_OF_CODE[err.code], publicDetail(ctx, err, lostWhat(resources, err)), {
        resource: first.resource,
        token: first.token.toString(),
        kind: err.kind,
      });
    }
    const detail = quorumLost(err, "too few lock nodes answered to confirm the extension", redlock.clients.length);
    throw new HttpProblem("unavailable", detail, { resource: first.resource });
  }
}
