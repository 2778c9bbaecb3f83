// With lease-grants.ts, the only gateway module that imports @fenced/lock: the stores and the rest of
// the gateway know a fence only as { resource, token, holder }, and a gateway without Redis never
// loads the lock.
import { Router, type Request, type Response } from "express";
import { probeNodes, Redlock, type Lease, type RedlockOptions } from "@fenced/lock";
import type { RedisClient } from "@fenced/lock/internal";
import { InvalidArgumentError } from "@fenced/fence";
import type { LeaseAnswer } from "../schemas/answers.js";
import { requireResource, requireWrite, type Principal } from "../auth/api-keys.js";
import type { FenceCredentials } from "../auth/credentials.js";
import { jsonBody, methodNotAllowed, type RouteContext } from "./context.js";
import { clientGone } from "../http/client-gone.js";
import { InFlight } from "../http/in-flight.js";
import { leaseBodySchema } from "../schemas/validation.js";
import type { LockProbe } from "../ops/health-routes.js";
import { nodeAddress } from "../ops/readiness.js";
import { LockNodeStates } from "../ops/lock-nodes.js";
import type { GatewayMetrics } from "../ops/metrics.js";
import { abandon, extend, grant, type Leases, type Registrar } from "./lease-grants.js";

export type { Registrar } from "./lease-grants.js";

/** Each lock node's metrics and state. */
interface LockNodes {
  readonly metrics: ReturnType<GatewayMetrics["lockNodes"]>;
  readonly states: LockNodeStates;
}

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

const BODY_LIMIT = 16 * 1024;
/**
 * The longest a scrape of /metrics waits for a silent lock node: half of Prometheus's default scrape
 * timeout (10 s), so that a nodeTimeoutMs set longer does not fail the scrape and take every series
 * with it. Above it, a node slower than this but within nodeTimeoutMs shows 0 until a lease finds it.
 */
export const SCRAPE_PROBE_MAX_MS = 5_000;

/**
 * The answer's shape is the API document's (schemas/answers.ts): the type keeps this code and the document
 * together. Everything sealed here comes from the lock's answer (each resource and its token, the
 * value, validUntil), never from the request.
 */
function leaseJson(lease: Lease, credentials: FenceCredentials): LeaseAnswer {
  const validUntil = lease.validUntil;
  const fences = lease.fences.map((f) => ({
    resource: f.resource,
    // A decimal string: JSON numbers are doubles, tokens are 64-bit.
    token: f.token.toString(),
    // The credential every write under this resource presents (Fencing-Credential) until validUntil:
    // the gateway takes resource, token and holder from it and from nothing else.
    fence: credentials.mint(f, validUntil),
  }));
  // A lease of several resources answers its first one's here, so that the answer keeps one shape.
  const first = fences[0] as (typeof fences)[number];
  return {
    fence: first.fence,
    resource: first.resource,
    token: first.token,
    fences,
    // Public: the stores accept an equal token only from this lease.
    holder: lease.holder,
    leaseId: credentials.leaseId({ fences: lease.fences, value: lease.value, validUntil }),
    validUntil,
  };
}

export function leasesRouter(
  ctx: RouteContext,
  credentials: FenceCredentials,
  options: LeaseBackendOptions,
  registrars: readonly Registrar[] = [],
): { router: Router; probe(timeoutMs: number, everyNode?: boolean): Promise<LockProbe>; settled(): Promise<void> } {
  // Each node's state, one for the lease scripts and the readiness probes alike (ops/lock-nodes.ts).
  const addresses = options.clients.map(nodeAddress);
  // Each scrape of /metrics probes every node first (refresh, below): the gauge holds with no lease and no /readyz.
  const metrics = ctx.metrics.lockNodes(addresses, () => refresh());
  const nodes: LockNodes = { metrics, states: new LockNodeStates(addresses, metrics.up, ctx.logger) };
  const { redlock, retry, acquireTimeoutMs, nodeTimeoutMs } = leaseLock(ctx, options, nodes);
  const leases: Leases = { ctx, credentials, redlock, registrars, retry, acquireTimeoutMs };
  const bodies = leaseBodySchema(ctx.limits.maxTtlMs);
  const readBody = jsonBody(BODY_LIMIT);
  const router = Router({ caseSensitive: true, strict: true });
  /** Grants in flight (grant()): settled() waits for them. Not a Set: see http/in-flight.ts. */
  const inFlight = new InFlight<Promise<unknown>>();

  router.post("/", async (req, res) => {
    const principal = principalFor(ctx, req, res);
    const { resources, ttlMs, register } = bodies.grant(await readBody(req, res));
    // Every resource of the lease: a set outside the key's scope in any part is refused whole.
    for (const resource of resources) requireResource(principal, resource);
    const granting = grant(leases, resources, ttlMs, register, clientGone(res));
    const slot = inFlight.add(granting);
    const lease = await granting.finally(() => inFlight.remove(slot, granting));
    // The client has gone: there is nobody to answer (the request is accounted as cut).
    if (lease === undefined) return;
    ctx.metrics.lease("granted");
    const body = leaseJson(lease, credentials);
    // The client may leave as the answer is written (its leaving not yet seen when the grant ended):
    // an answer that did not finish leaves nobody with the lease id, so the lease is released.
    res.once("close", () => {
      if (res.writableFinished) return;
      const abandoning = abandon(leases, lease, "the client left while the lease was answered");
      const slot = inFlight.add(abandoning);
      void abandoning.finally(() => inFlight.remove(slot, abandoning));
    });
    // No Location header: a lease id is a capability (extend, release), and Location headers are logged.
    res.status(201).json(body);
  });
  router.all("/", (_req, res) => methodNotAllowed(res, "POST"));

  heldLeaseRoutes(router, leases, bodies, readBody);

  // Readiness: the lock works while a quorum answers; every node is reported, with its address (for the admin listener).
  const probe = async (timeoutMs: number, everyNode = false): Promise<LockProbe> => {
    const since = nodes.states.mark();
    const probed = await probeNodes(redlock, timeoutMs, { everyNode });
    nodes.states.probed(probed, since);
    return { ...probed, addresses };
  };
  // A scrape's probe: every node's own answer (a paused node is `timeout`, not `pending`) within one
  // node timeout, and never longer than SCRAPE_PROBE_MAX_MS; scrapes that overlap share one probe.
  let probing: Promise<unknown> | undefined;
  const refresh = (): Promise<unknown> =>
    (probing ??= probe(Math.min(nodeTimeoutMs, SCRAPE_PROBE_MAX_MS), true).finally(() => {
      probing = undefined;
    }));
  // Until each has ended, a lease its client left may still be granted and then released: the lock's
  // connections must stay open that long (the CLI closes them after a drain).
  const settled = async (): Promise<void> => {
    while (inFlight.size > 0) await Promise.allSettled([...inFlight]);
  };
  return { router, probe, settled };
}

/** POST /extend and /release: what a lease's holder does with its id. */
function heldLeaseRoutes(
  router: Router,
  leases: Leases,
  bodies: ReturnType<typeof leaseBodySchema>,
  readBody: ReturnType<typeof jsonBody>,
): void {
  const { ctx, credentials, redlock } = leases;
  // A lease id travels in the body, never in the path: it is a capability (extend, release), and
  // paths end up in proxies' and load balancers' access logs.
  router.post("/extend", async (req, res) => {
    const principal = principalFor(ctx, req, res);
    const { leaseId, ttlMs } = bodies.extend.parse(await readBody(req, res));
    // Sealed by this gateway: the resources, tokens and value the new credentials carry are the ones
    // the lock granted, never the client's (an edited id is a 403 and earns nothing).
    const held = credentials.lease(leaseId);
    // The id names its resources; the caller's key must cover each, whoever the lease was issued to.
    for (const { resource } of held.fences) requireResource(principal, resource);
    const lease = await extend(leases, held, ttlMs);
    ctx.metrics.lease("extended");
    res.json(leaseJson(lease, credentials));
  });
  router.all("/extend", (_req, res) => methodNotAllowed(res, "POST"));

  router.post("/release", async (req, res) => {
    const principal = principalFor(ctx, req, res);
    const { leaseId } = bodies.release.parse(await readBody(req, res));
    const held = credentials.lease(leaseId);
    for (const { resource } of held.fences) requireResource(principal, resource);
    // Past its end too (its keys may linger on a node that took them late). Deletes each key only
    // where it still holds this lease's value: a stale id releases nothing.
    await ctx.metrics.time("leases", "release", () => redlock.release(held));
    ctx.metrics.lease("released");
    res.status(204).end();
  });
  router.all("/release", (_req, res) => methodNotAllowed(res, "POST"));
}

/**
 * The lock the routes use, with the retries acquire() runs itself and the bound on them. Throws
 * InvalidArgumentError when acquireTimeoutMs leaves no room for one attempt.
 */
function leaseLock(
  ctx: RouteContext,
  options: LeaseBackendOptions,
  nodes: LockNodes,
): Pick<Leases, "redlock" | "retry" | "acquireTimeoutMs"> & { readonly nodeTimeoutMs: number } {
  const given = options.redlock ?? {};
  const nodeTimeoutMs = given.nodeTimeoutMs ?? LOCK_DEFAULTS.nodeTimeoutMs;
  const retry = {
    count: given.retryCount ?? LOCK_DEFAULTS.retryCount,
    delayMs: given.retryDelayMs ?? LOCK_DEFAULTS.retryDelayMs,
    jitterMs: given.retryJitterMs ?? LOCK_DEFAULTS.retryJitterMs,
    // An attempt is at most three fan-outs, each ended by nodeTimeoutMs: grant, publish, release.
    attemptMs: 3 * nodeTimeoutMs,
  };
  // Each node's result in each round feeds the per-node metrics and the node's state (shared with the
  // readiness probes: nodes), and the embedder's own hook if it gave one.
  const onNodeResult = given.onNodeResult;
  // The lock itself never retries here: acquire() does, within its deadline.
  const redlock = new Redlock(options.clients, {
    ...given,
    nodeTimeoutMs,
    retryCount: 0,
    onNodeResult: (result) => {
      nodes.metrics.result(result);
      nodes.states.result(result);
      onNodeResult?.(result);
    },
  });
  const acquireTimeoutMs = options.acquireTimeoutMs ?? LOCK_DEFAULTS.acquireTimeoutMs;
  // Shorter, no attempt could be sure to end within it: every held lock would answer after one attempt, late.
  if (acquireTimeoutMs < retry.attemptMs)
    throw new InvalidArgumentError(
      "acquireTimeoutMs",
      `${acquireTimeoutMs} ms is shorter than one attempt of the lock (three rounds of nodeTimeoutMs): give at least ${retry.attemptMs}`,
    );
  return { redlock, retry, acquireTimeoutMs, nodeTimeoutMs };
}

/** The caller, authenticated (its id on res.locals.principal) and allowed to write. */
function principalFor(ctx: RouteContext, req: Request, res: Response): Principal {
  const principal = ctx.auth.authenticate(req);
  res.locals.principal = principal.id;
  requireWrite(principal);
  return principal;
}
