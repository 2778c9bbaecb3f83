import { performance } from "node:perf_hooks";
import express, { type Express, type NextFunction, type Request, type Response } from "express";
import { pino, type Logger } from "pino";
import type { ObjectStore } from "@fenced/store";
import { InvalidArgumentError } from "@fenced/fence";
import type { CredentialKey } from "@fenced/fence/credentials";
import { admissionGate, type AdmissionOptions } from "./admission/gate.js";
import type { FenceSet } from "@fenced/store/internal";
import type { HealthAnswer } from "./schemas/answers.js";
import { ApiKeys, type ApiKeyConfig } from "./auth/api-keys.js";
import { FenceCredentials } from "./auth/credentials.js";
import { limitsSchema, type Limits, type RouteContext } from "./routes/context.js";
import { routeOf } from "./http/route.js";
import { onMalformed } from "./http/client-errors.js";
import { requestLogger, scopeRequest } from "./http/request-scope.js";
import { arrivalOf, onAcceptError, onDrain, setEarlyHandler } from "./http/server.js";
import { gatewayReadiness, healthRoutes, type Readiness } from "./ops/health-routes.js";
import { GatewayMetrics } from "./ops/metrics.js";
import { openApiDocument, type OpenApiDocument } from "./openapi/document.js";
import { account, fail } from "./outcomes.js";
import { HttpProblem } from "./problems/problem.js";
import { fencesRouter } from "./routes/fences.js";
import { leasesRouter, type LeaseBackendOptions, type Registrar } from "./routes/leases.js";
import { objectsRouter } from "./routes/objects.js";
import { recordsRouter } from "./routes/records.js";
import type { AnyStoreDriver, BodyLimits, Family, FamilyStores, Prepare, StorePool, StoreRegistration } from "./stores/registration.js";
import { STORES, type FamilyOptions, type StoreDrivers, type StoreName } from "./stores/registry.js";

export interface GatewayOptions {
  readonly apiKeys: readonly ApiKeyConfig[];
  /**
   * /v1/records: the options of one of the records family's stores (stores/registry.ts): PostgreSQL
   * on a pool, or DynamoDB with a client and table (no POST /v1/records: no transaction).
   * Omitted: the routes answer 404.
   */
  readonly records?: FamilyOptions<"records">;
  /**
   * /v1/objects: the options of one of the objects family's stores: S3 with a client and bucket (create
   * the client with requestChecksumCalculation "WHEN_REQUIRED" for radosgw), or Azure Blob on a
   * container. Omitted: the routes answer 404.
   */
  readonly objects?: FamilyOptions<"objects">;
  /** /v1/leases: Redlock over these Redis nodes. */
  readonly leases?: LeaseBackendOptions;
  /**
   * Keys for fence credentials (HMAC-SHA256, at least 32 bytes each): the first signs the credential
   * of every lease granted here; all verify the credentials writes present. Share them with every
   * gateway instance (and with services that mint credentials for their own leases). Required with
   * `leases`: lease ids are sealed with them too. Without keys, only trusted lock clients can write.
   */
  readonly fenceKeys?: readonly CredentialKey[] | undefined;
  /** Defaults: records 1 MiB, objects 5 GiB, leases 1 h. */
  readonly limits?: {
    readonly recordBytes?: number | undefined;
    readonly objectBytes?: number | undefined;
    readonly maxTtlMs?: number | undefined;
  };
  readonly logger?: Logger;
  /** Node process metrics (memory, event loop, GC) in /metrics. Default true. */
  readonly defaultMetrics?: boolean;
  /** Per-backend deadline of GET /healthz. Default 2,000 ms. */
  readonly healthTimeoutMs?: number;
  /**
   * The deadline of each call into a store (the stores' `timeoutMs`): past it the request answers
   * 503 `unavailable` (nothing written) or `outcome-unknown` (a write sent, its answer lost).
   * Default 5,000 ms (100 to 600,000); `objects.timeoutMs` wins for S3.
   */
  readonly storeTimeoutMs?: number;
  /**
   * Admission control: under overload, requests are refused early (503 `overloaded`, Retry-After)
   * rather than all answered late. On by default; admission/gate.ts lists the knobs and defaults.
   */
  readonly admission?: AdmissionOptions;
  /**
   * Serve /healthz and /metrics only on `admin` (an app for a listener of their own, such as an
   * address only the infrastructure reaches), not on `app`. Default false: `app` serves them too.
   */
  readonly separateAdmin?: boolean;
}

/** Readiness, as GET /readyz answers it on the admin listener (ops/readiness.ts). */
export type HealthReport = HealthAnswer;

export interface Gateway {
  readonly app: Express;
  /** /healthz and /metrics alone, for an admin listener (see GatewayOptions.separateAdmin). */
  readonly admin: Express;
  readonly metrics: GatewayMetrics;
  readonly records: FamilyStores["records"] | undefined;
  readonly objects: ObjectStore | undefined;
  /**
   * Each configured store's start work (stores/registry.ts): PostgreSQL's tables created (migrate;
   * without it, read to prove they exist), the S3 backend proven to honour conditional writes (verify).
   */
  prepare(options?: { readonly migrate?: boolean; readonly verify?: boolean }): Promise<void>;
  /** The readiness report, with addresses; `everyNode`: each lock node's own answer, none `pending` (for a start check). */
  health(options?: { readonly everyNode?: boolean }): Promise<HealthReport>;
  /**
   * From now on /healthz answers 503 `draining` (on the admin listener too), so that a load balancer
   * stops sending new requests while the ones in flight finish. Called when a stop begins.
   */
  beginDrain(): void;
  /**
   * Resolves once no lease request is still being granted. A lease granted after its client left (a
   * drain cut the connection) is released then: close the lock's connections only after this.
   */
  settled(): Promise<void>;
  /** Stops the gateway's own timer (admission control's event-loop clock). */
  close(): void;
}

const DEFAULT_INLINE = 64 * 1024;

/**
 * The HTTP gateway (index.ts's createGateway), each store it serves made by the driver given for it:
 * every store's from createGateway, only the configured stores' from the bin.
 */
export function createGatewayOn(options: GatewayOptions, drivers: StoreDrivers): Gateway {
  const logger = options.logger ?? pino({ name: "fenced-gateway" });
  const metrics = new GatewayMetrics({
    ...(options.defaultMetrics === undefined ? {} : { defaultMetrics: options.defaultMetrics }),
    // Addresses only where /metrics is not public.
    nodeAddresses: options.separateAdmin === true,
  });
  const healthTimeoutMs = options.healthTimeoutMs ?? 2_000;
  const served = servedStores(options, drivers, metrics);
  const ctx = routeContext(options, logger, metrics, bodyLimitsOf(served));
  const { limits, credentials } = ctx;
  const records = storeOf(served, "records");
  const objects = storeOf(served, "objects");
  const app = newApp(ctx);
  // Before every route, after the request's id and accounting: a refused request does no lock or store work.
  const admission = admissionOf(options, served, ctx, metrics, logger);
  app.use(admission.handler);
  if (admission.early !== undefined) setEarlyHandler(app, admission.early);
  onDrain(app, () => admission.beginDrain());
  const leases =
    options.leases === undefined || credentials === undefined
      ? undefined
      : leasesRouter(ctx, credentials, options.leases, registrars(served));
  mountFamilies(app, ctx, served);
  app.use("/v1/leases", leases === undefined ? disabled("leases") : leases.router);
  // Each configured store's fence of a resource; with no store there is no fence to read.
  const fenced = served.map(({ registration, store }) => ({ name: registration.name, family: registration.family, store }));
  app.use("/v1/fences", served.length === 0 ? disabled("fences") : fencesRouter(ctx, fenced));

  let draining = false;
  const readiness = gatewayReadiness({
    stores: served.map(({ registration, driver, options: given, store }) => ({
      name: registration.name,
      check: (timeoutMs: number) => driver.check(store, given, timeoutMs),
    })),
    lock: leases,
    timeoutMs: healthTimeoutMs,
    draining: () => draining,
  });
  // Unauthenticated: the API document, with this gateway's limits, built on first use.
  let document: OpenApiDocument | undefined;
  app.get("/openapi.json", (_req, res) => {
    document ??= openApiDocument(limits);
    res.json(document);
  });
  const admin = newApp(ctx);
  for (const target of [app, admin])
    onMalformed(target, ({ reason, code, requestId }) => {
      metrics.malformed(reason);
      logger.info({ requestId, reason, code }, "malformed request");
    });
  for (const target of [app, admin])
    onAcceptError(target, (err) =>
      logger.error({ err }, "a connection could not be accepted (the host is short of descriptors or memory); the gateway goes on"),
    );
  for (const target of options.separateAdmin === true ? [admin] : [admin, app]) operations(target, readiness, metrics, target === admin);
  for (const target of [app, admin]) {
    target.use(() => {
      throw new HttpProblem("notFound", "no such route");
    });
    target.use((err: unknown, req: Request, res: Response, _next: NextFunction) => fail(ctx, err, req, res));
  }

  return {
    app,
    admin,
    metrics,
    records,
    objects,
    health: (options) => readiness.report(options),
    beginDrain: () => {
      draining = true;
    },
    settled: () => leases?.settled() ?? Promise.resolve(),
    close: () => admission.stop(),
    prepare: (p = {}) => prepareStores(served, metrics, p),
  };
}

/** Gateway.prepare: each configured store's start work (migrate, verify) before the gateway serves. */
async function prepareStores(served: readonly Served[], metrics: GatewayMetrics, p: Prepare): Promise<void> {
  // Timed as calls into the store are: a backend's own refusal becomes BackendFailedError (start-checks.ts reads it).
  for (const { registration, store } of served)
    await registration.prepare(store, p, (operation, work) => metrics.time(registration.family, operation, work));
}

/** Admission control (admission/gate.ts), its refusals counted as every answer is; the records family's limit floored at its pool's size. */
function admissionOf(
  options: GatewayOptions,
  served: readonly Served[],
  ctx: RouteContext,
  metrics: GatewayMetrics,
  logger: Logger,
): ReturnType<typeof admissionGate> {
  return admissionGate({
    config: options.admission ?? {},
    auth: ctx.auth,
    metrics: metrics.admission,
    logger,
    answered: (route, method, status, seconds) => metrics.request(route, method, status, seconds),
    recordsPoolSize: poolSizeOf(servedOf(served, "records")?.pool),
  });
}

/** A pool's connections at most: pg's Pool sets `options.max` (10 when not given); a pool-like object of the user's may not say. */
function poolSizeOf(pool: StorePool | undefined): number | undefined {
  const max = pool?.options?.max;
  return typeof max === "number" && Number.isInteger(max) && max > 0 ? max : undefined;
}

/** What every route gets: API keys, metrics, the request's logger, the limits and the fence credentials (required with leases). */
function routeContext(options: GatewayOptions, logger: Logger, metrics: GatewayMetrics, bodies: BodyLimits): RouteContext {
  const given = limitsSchema.parse(options.limits ?? {});
  // A store that keeps each body whole in one request (Azure Blob) takes no more than it says: a larger body is a 413 before any I/O.
  const objectBytes = bodies.maxBodyBytes === undefined ? given.objectBytes : Math.min(given.objectBytes, bodies.maxBodyBytes);
  const limits: Limits = { ...given, objectBytes, inlineBytes: bodies.inlineBytes ?? DEFAULT_INLINE };
  const credentials =
    options.fenceKeys === undefined || options.fenceKeys.length === 0 ? undefined : new FenceCredentials(options.fenceKeys);
  if (options.leases !== undefined && credentials === undefined) {
    throw new InvalidArgumentError(
      "fenceKeys",
      "leases need fence keys: the gateway seals every lease id and fence credential it issues with them",
    );
  }
  return {
    auth: new ApiKeys(options.apiKeys),
    metrics,
    // Inside a request, its own logger: every line carries its requestId (http/request-scope.ts).
    get logger() {
      return requestLogger(logger);
    },
    logs: (level) => logger.isLevelEnabled(level),
    limits,
    credentials,
  };
}

/** A configured store: its registration and driver, the options it was made with, and the store. */
interface Served {
  readonly registration: StoreRegistration;
  readonly driver: AnyStoreDriver;
  readonly options: unknown;
  readonly store: FamilyStores[Family];
  /** Its pool of connections, if it has one (StoreDefinition.pool). */
  readonly pool: StorePool | undefined;
}

/**
 * The store of each family the options configure, the registration whose options they are (by
 * their shape: StoreDefinition.accepts), each call bounded by storeTimeoutMs (default 5,000 ms), its
 * pool (if it has one) reported in /metrics, its backend's own errors told by its registration.
 */
function servedStores(options: GatewayOptions, drivers: StoreDrivers, metrics: GatewayMetrics): Served[] {
  const storeTimeoutMs = options.storeTimeoutMs ?? 5_000;
  return (["records", "objects"] as const).flatMap((family) => {
    const given: object | undefined = options[family];
    if (given === undefined) return [];
    const matching = STORES.filter((one) => one.family === family && one.accepts(given));
    const registration = matching[0];
    // Options that fit two stores (a bucket and a container) name neither: refused, never a guess.
    if (registration === undefined || matching.length > 1) {
      const shapes = STORES.filter((one) => one.family === family).map((one) => one.title);
      throw new InvalidArgumentError(family, `must be the options of exactly one of its stores (${shapes.join(", ")})`);
    }
    const driver = drivers[registration.name as StoreName];
    // The bin loads the driver of every store it configures, createGateway every driver there is.
    if (driver === undefined) throw new Error(`no driver loaded for the ${registration.title} store`);
    const pool = registration.pool?.(given);
    if (pool !== undefined) metrics.storePool(registration, pool);
    metrics.servedBy(family, registration);
    return [{ registration, driver, options: given, store: driver.create(given, storeTimeoutMs), pool }];
  });
}

/** /v1/records and /v1/objects, each on the store serving its family, or answering 404 without one. */
function mountFamilies(app: Express, ctx: RouteContext, served: readonly Served[]): void {
  const records = storeOf(served, "records");
  const objects = storeOf(served, "objects");
  // The records store's name: a problem it cannot avoid (POST /v1/records without a transaction) names it.
  const recordsName = servedOf(served, "records")?.registration.name as StoreName | undefined;
  app.use(
    "/v1/records",
    records === undefined || recordsName === undefined ? disabled("records") : recordsRouter(ctx, records, recordsName),
  );
  app.use("/v1/objects", objects === undefined ? disabled("objects") : objectsRouter(ctx, objects));
}

/** What the objects store takes of a body, as its registration says (none without one). */
function bodyLimitsOf(served: readonly Served[]): BodyLimits {
  const objects = servedOf(served, "objects");
  return objects?.registration.bodyLimits?.(objects.options, objects.store) ?? {};
}

/** The store serving `family`, if one is configured (one per family at most: servedStores). */
function servedOf(served: readonly Served[], family: Family): Served | undefined {
  return served.find(({ registration }) => registration.family === family);
}

/** The store serving `family`, of that family's contract. */
function storeOf<F extends Family>(served: readonly Served[], family: F): FamilyStores[F] | undefined {
  // A registration of `family` makes a store of its contract (StoreDriver.create).
  return servedOf(served, family)?.store as FamilyStores[F] | undefined;
}

/**
 * The registrars of fence-on-acquire: a lease request may ask for its fences (one per resource) to be
 * registered with every store here, all of a lease's in one call per store (PostgreSQL raises all of
 * them or none; S3 each on its own, and a raise alone only refuses holders older than a token the lock
 * granted: StoreCapabilities.atomicRegister).
 */
function registrars(served: readonly Served[]): Registrar[] {
  return served.map(({ registration, store }) => ({
    store: registration.family,
    register: (lease: FenceSet, signal: AbortSignal) => store.register(lease, { signal }),
  }));
}

/** An express app with the gateway's settings and its request accounting, before any route. */
function newApp(ctx: RouteContext): Express {
  const app = express();
  // Before the first route: the router reads these when it is created. "/V1/RECORDS" is not a route.
  app.set("case sensitive routing", true);
  app.set("strict routing", true);
  app.set("etag", false);
  app.set("query parser", false);
  app.disable("x-powered-by");
  // First: the request id and span, so that every answer carries the id and every line logs it.
  app.use(scopeRequest(routeOf));
  app.use((req, res, next) => {
    // From its arrival: a request admission control held in its queue counts the wait.
    const started = arrivalOf(req) ?? performance.now();
    const route = routeOf(req);
    const done = (): void => account(ctx, req, res, route, performance.now() - started);
    // Closed already: its client left while admission control held it in the queue (serve() runs
    // the app then, so that it is counted and logged as any request whose client left).
    if (res.closed) done();
    else res.once("close", done);
    next();
  });
  return app;
}

/** Unauthenticated, for load balancers and scrapers: neither names a key, a resource or a secret. */
function operations(app: Express, readiness: Readiness, metrics: GatewayMetrics, admin: boolean): void {
  healthRoutes(app, readiness, admin);
  app.get("/metrics", async (_req, res) => {
    res.setHeader("Content-Type", metrics.registry.contentType);
    res.send(await metrics.registry.metrics());
  });
}

function disabled(what: string) {
  return () => {
    throw new HttpProblem("notFound", `${what} are not enabled on this gateway`);
  };
}
