// The only gateway module that imports @fenced/lock: the stores and the rest of the gateway know a
// fence only as { resource, token, holder }, and a gateway without Redis never loads the lock.
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { Router, type Request, type Response } from "express";
import {
  LeaseLostError,
  LockNotAcquiredError,
  Redlock,
  TokenSpaceExhaustedError,
  type Lease,
  type RedisClient,
  type RedlockOptions,
} from "@fenced/lock";
import { InvalidArgumentError, type Fence } from "@fenced/fence";
import type { LeaseAnswer } from "../schemas/answers.js";
import { requireResource, requireWrite, type Principal } from "../auth/api-keys.js";
import type { FenceCredentials, IssuedLease } from "../auth/credentials.js";
import type { LeaseIdParts } from "../auth/lease-id.js";
import type { StoreName } from "../ops/metrics.js";
import { jsonBody, methodNotAllowed, type RouteContext } from "../http/context.js";
import { clientGone } from "../http/client-gone.js";
import { HttpProblem } from "../problems/problem.js";
import { leaseBodySchema } from "../schemas/validation.js";

export interface LeaseBackendOptions {
  /** One ioredis client per independent lock node (or one Cluster client). */
  readonly clients: readonly RedisClient[];
  /**
   * Lock settings; the gateway's defaults are LOCK_DEFAULTS. retryCount 0: a held lock answers 409 at
   * once and the client decides when to retry. The gateway runs the retries itself (see acquire).
   */
  readonly redlock?: RedlockOptions;
  /**
   * How long POST /v1/leases may spend on the lock: no retry starts that could not end before it
   * (one attempt takes at most three rounds of nodeTimeoutMs). Default 2,000 ms.
   */
  readonly acquireTimeoutMs?: number;
}

/**
 * The gateway's lock settings unless told otherwise. nodeTimeoutMs is passed to the lock explicitly
 * and the retry settings drive acquire()'s own retries: the bound on an acquire is computed from the
 * values in use, never from the lock's defaults.
 */
const LOCK_DEFAULTS = { retryCount: 0, retryDelayMs: 200, retryJitterMs: 100, nodeTimeoutMs: 200, acquireTimeoutMs: 2_000 };

/** Why a node did not count that means it is down or unreachable, not that the lock is held. */
const UNREACHABLE: ReadonlySet<string> = new Set(["error", "timeout", "refused"]);

export interface RedisHealth {
  readonly ok: boolean;
  readonly quorum: number;
  readonly nodes: readonly { readonly ok: boolean; readonly error?: string }[];
}

const BODY_LIMIT = 16 * 1024;

/**
 * The answer's shape is the API document's (schemas/answers.ts): the type keeps this code and the document
 * together. Everything sealed here comes from the lock's answer (resource, token, value, validUntil),
 * never from the request.
 */
function leaseJson(lease: Lease, credentials: FenceCredentials): LeaseAnswer {
  const issued: IssuedLease = {
    resource: lease.resource,
    token: lease.token,
    holder: lease.holder,
    value: lease.value,
    validUntil: lease.validUntil,
  };
  return {
    // The credential every write of this lease presents (Fencing-Credential) until validUntil: the
    // gateway takes resource, token and holder from it and from nothing else.
    fence: credentials.mint(issued),
    resource: lease.resource,
    // A decimal string: JSON numbers are doubles, tokens are 64-bit.
    token: lease.token.toString(),
    // Public: the stores accept an equal token only from this lease.
    holder: lease.holder,
    leaseId: credentials.leaseId(issued),
    validUntil: lease.validUntil,
  };
}

/** Raises one store's ratchet to a fence (FencedPostgres/FencedS3.register). */
export interface Registrar {
  readonly store: StoreName;
  /** `signal` aborts when the client has gone: the lease will be released, its registration is moot. */
  register(fence: Fence, signal: AbortSignal): Promise<void>;
}

/** What the lease routes share: the gateway's context, its fence keys, the lock and the stores to register with. */
interface Leases {
  readonly ctx: RouteContext;
  readonly credentials: FenceCredentials;
  readonly redlock: Redlock;
  readonly registrars: readonly Registrar[];
  readonly retry: { readonly count: number; readonly delayMs: number; readonly jitterMs: number; readonly attemptMs: number };
  readonly acquireTimeoutMs: number;
}

export function leasesRouter(
  ctx: RouteContext,
  credentials: FenceCredentials,
  options: LeaseBackendOptions,
  registrars: readonly Registrar[] = [],
): { router: Router; health(timeoutMs: number): Promise<RedisHealth>; settled(): Promise<void> } {
  const given = options.redlock ?? {};
  const retry = {
    count: given.retryCount ?? LOCK_DEFAULTS.retryCount,
    delayMs: given.retryDelayMs ?? LOCK_DEFAULTS.retryDelayMs,
    jitterMs: given.retryJitterMs ?? LOCK_DEFAULTS.retryJitterMs,
    // An attempt is at most three fan-outs, each ended by nodeTimeoutMs: grant, publish, release.
    attemptMs: 3 * (given.nodeTimeoutMs ?? LOCK_DEFAULTS.nodeTimeoutMs),
  };
  // The lock itself never retries here: acquire() does, within its deadline.
  const redlock = new Redlock(options.clients, {
    ...given,
    nodeTimeoutMs: given.nodeTimeoutMs ?? LOCK_DEFAULTS.nodeTimeoutMs,
    retryCount: 0,
  });
  const acquireTimeoutMs = options.acquireTimeoutMs ?? LOCK_DEFAULTS.acquireTimeoutMs;
  // Shorter, no attempt could be sure to end within it: every held lock would answer after one attempt, late.
  if (acquireTimeoutMs < retry.attemptMs)
    throw new InvalidArgumentError(
      "acquireTimeoutMs",
      `${acquireTimeoutMs} ms is shorter than one attempt of the lock (three rounds of nodeTimeoutMs): give at least ${retry.attemptMs}`,
    );
  const leases: Leases = { ctx, credentials, redlock, registrars, retry, acquireTimeoutMs };
  const bodies = leaseBodySchema(ctx.limits.maxTtlMs);
  const readBody = jsonBody(BODY_LIMIT);
  const router = Router({ caseSensitive: true, strict: true });
  /** Grants in flight (grant()): settled() waits for them. */
  const inFlight = new Set<Promise<unknown>>();

  const principalFor = (req: Request, res: Response): Principal => {
    const principal = ctx.auth.authenticate(req);
    res.locals.principal = principal.id;
    requireWrite(principal);
    return principal;
  };

  router.post("/", async (req, res) => {
    const principal = principalFor(req, res);
    const { resource, ttlMs, register } = bodies.create.parse(await readBody(req, res));
    requireResource(principal, resource);
    const granting = grant(leases, resource, ttlMs, register, clientGone(res));
    inFlight.add(granting);
    const lease = await granting.finally(() => inFlight.delete(granting));
    // The client has gone: there is nobody to answer (the request is accounted as cut).
    if (lease === undefined) return;
    ctx.metrics.lease("granted");
    // No Location header: a lease id is a capability (extend, release), and Location headers are logged.
    res.status(201).json(leaseJson(lease, credentials));
  });
  router.all("/", (_req, res) => methodNotAllowed(res, "POST"));

  // A lease id travels in the body, never in the path: it is a capability (extend, release), and
  // paths end up in proxies' and load balancers' access logs.
  router.post("/extend", async (req, res) => {
    const principal = principalFor(req, res);
    const { leaseId, ttlMs } = bodies.extend.parse(await readBody(req, res));
    // Sealed by this gateway: the token, value and resource the new credential carries are the ones
    // the lock granted, never the client's (an edited id is a 403 and earns nothing).
    const held = credentials.lease(leaseId);
    // The id names its resource; the caller's key must cover it, whoever the lease was issued to.
    requireResource(principal, held.resource);
    const lease = await extend(leases, held, ttlMs);
    ctx.metrics.lease("extended");
    res.json(leaseJson(lease, credentials));
  });
  router.all("/extend", (_req, res) => methodNotAllowed(res, "POST"));

  router.post("/release", async (req, res) => {
    const principal = principalFor(req, res);
    const { leaseId } = bodies.release.parse(await readBody(req, res));
    const held = credentials.lease(leaseId);
    requireResource(principal, held.resource);
    // Past its end too (its keys may linger on a node that took them late). Deletes the key only where it still holds this lease's value: a stale id releases nothing.
    await ctx.metrics.time("leases", "release", () => redlock.release(held));
    ctx.metrics.lease("released");
    res.status(204).end();
  });
  router.all("/release", (_req, res) => methodNotAllowed(res, "POST"));

  const health = async (timeoutMs: number): Promise<RedisHealth> => {
    const nodes = await Promise.all(redlock.clients.map((client) => ping(client, timeoutMs)));
    // The lock works while a quorum answers; report every node so an operator sees which one is down.
    return { ok: nodes.filter((n) => n.ok).length >= redlock.quorum, quorum: redlock.quorum, nodes };
  };
  // Until each has ended, a lease its client left may still be granted and then released: the lock's
  // connections must stay open that long (the CLI closes them after a drain).
  const settled = async (): Promise<void> => {
    while (inFlight.size > 0) await Promise.allSettled([...inFlight]);
  };
  return { router, health, settled };
}

/**
 * acquire() and, if asked, registerEverywhere(), for a client that may leave meanwhile. A lease
 * granted (or registered) after the client has gone is released at once: nobody holds its lease id,
 * and it would keep the resource locked for its whole TTL. undefined when the client has gone.
 */
async function grant(leases: Leases, resource: string, ttlMs: number, register: boolean, gone: AbortSignal): Promise<Lease | undefined> {
  let lease: Lease;
  try {
    lease = await acquire(leases, resource, ttlMs, gone);
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
  await releaseQuietly(leases, lease, "the client left before the lease was answered");
  leases.ctx.metrics.leaseAbandoned();
  return undefined;
}

/** Releases a lease nobody will use; a failure is logged (the lease then ends with its TTL), never thrown. */
async function releaseQuietly({ ctx }: Leases, lease: Lease, why: string): Promise<void> {
  try {
    await ctx.metrics.time("leases", "release", () => lease.release());
    ctx.logger.info({ resource: lease.resource, token: lease.token.toString() }, `lease released: ${why}`);
  } catch (err) {
    ctx.logger.warn(
      { err, resource: lease.resource, validUntil: lease.validUntil },
      `could not release a lease (${why}); it ends with its TTL`,
    );
  }
}

/**
 * Takes the lock, or answers why not: its tokens are used up, it is down (no quorum possible), or it
 * is held. Bounded: a lock that cannot reach a quorum answers after one attempt (retrying within this
 * request cannot help; Retry-After tells the client when to ask again), and a held lock is retried only
 * while another attempt can end before acquireTimeoutMs.
 */
async function acquire(
  { ctx, redlock, retry, acquireTimeoutMs }: Leases,
  resource: string,
  ttlMs: number,
  signal: AbortSignal,
): Promise<Lease> {
  const deadline = performance.now() + acquireTimeoutMs;
  for (let attempt = 0; ; attempt++) {
    try {
      // The signal stops the loop between attempts; an attempt in flight runs to its end.
      return await ctx.metrics.time("leases", "acquire", () => redlock.acquire(resource, ttlMs, { retryCount: 0, signal }));
    } catch (err) {
      if (err instanceof TokenSpaceExhaustedError) throw new HttpProblem("tokenSpaceExhausted", err.message, { resource });
      if (!(err instanceof LockNotAcquiredError)) throw err;
      // So many nodes failed or timed out that no quorum was possible: the lock is down, not busy.
      const unreachable = err.nodes.filter((n) => UNREACHABLE.has(n.reason)).length;
      if (unreachable > redlock.clients.length - redlock.quorum)
        throw new HttpProblem("unavailable", "too few lock nodes answered", { resource });
      const delay = retry.delayMs + Math.random() * retry.jitterMs;
      if (attempt >= retry.count || performance.now() + delay + retry.attemptMs > deadline) {
        // Contention (held elsewhere, or a round lost to a concurrent one): worth retrying later.
        ctx.metrics.lease("refused");
        throw new HttpProblem("lockHeld", err.message, { resource });
      }
      await sleep(delay, undefined, { signal });
    }
  }
}

/**
 * Fence-on-acquire: every older holder is refused by every store from now on, also on keys this
 * lease never writes. A store that has seen a higher token (the lock's counters are behind it)
 * refuses the registration: the lease is useless for writing, so it is released at once.
 */
async function registerEverywhere(leases: Leases, lease: Lease, signal: AbortSignal): Promise<void> {
  const { ctx, registrars } = leases;
  try {
    await Promise.all(registrars.map((r) => ctx.metrics.time(r.store, "register", () => r.register(lease, signal))));
  } catch (err) {
    await releaseQuietly(leases, lease, signal.aborted ? "the client left during its registration" : "its registration failed");
    // The lease ran out before every store registered it (a store refuses a lease it knows ended).
    if (err instanceof LeaseLostError) {
      ctx.metrics.leaseLost(err.kind);
      throw new HttpProblem("leaseLost", err.message, { resource: lease.resource, token: lease.token.toString(), kind: err.kind });
    }
    throw err;
  }
}

/** Extends the lease a lease id names, or answers that it is lost, or that too few nodes answered to tell. */
async function extend({ ctx, redlock }: Leases, held: LeaseIdParts, ttlMs: number): Promise<Lease> {
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
      throw new HttpProblem("leaseLost", err.message, { resource: held.resource, token: held.token.toString(), kind: err.kind });
    }
    throw new HttpProblem("unavailable", "too few lock nodes answered to confirm the extension", { resource: held.resource });
  }
}

async function ping(client: RedisClient, timeoutMs: number): Promise<{ ok: boolean; error?: string }> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    });
    const answer = await Promise.race([client.ping(), timeout]);
    return answer === "PONG" ? { ok: true } : { ok: false, error: `unexpected answer ${String(answer)}` };
  } catch (err) {
    return { ok: false, error: err instanceof Error ? err.message : String(err) };
  } finally {
    clearTimeout(timer);
  }
}
