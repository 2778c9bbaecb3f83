#!/usr/bin/env node
import { pino, type Logger } from "pino";
import { InvalidArgumentError } from "@fenced/fence";
import { createGatewayOn, type Gateway, type GatewayOptions } from "./app.js";
import { DEFAULT_MIN_AGE, gatewayProgram } from "./cli-program.js";
import { loadConfig, loadSweepConfig, type GatewayConfig } from "./config.js";
import { durationMs, sweepCommand } from "./sweep.js";
import { serve, type Serving } from "./http/server.js";
import { refuseUnhealthy, StartRefusedError, startRefusal } from "./ops/start-checks.js";
import { startProcessTracing } from "./ops/tracing.js";
import { RECHECK_INTERVAL_MS, recheckInBackground, type Recheck } from "./ops/recheck.js";
import type { AnyStoreDriver, Family } from "./stores/registration.js";
import { loadDriver, STORES, type StoreDrivers, type StoreName } from "./stores/registry.js";
import { GATEWAY_VERSION, nodeSupported, SUPPORTED_NODE } from "./version.js";

async function main(config: GatewayConfig, logger: Logger): Promise<void> {
  const closers: Closers = [];
  const closeAll = () => Promise.allSettled(closers.map((close) => close()));
  // Listening already when a later step fails (an admin port in use): closed before the backends.
  const listening: Serving[] = [];
  try {
    const stores = await storesOf(config, logger, closers);
    const leases = config.redis === undefined ? undefined : await leasesBackend(config.redis, logger, closers);
    const options: GatewayOptions = {
      apiKeys: config.apiKeys,
      fenceKeys: config.fenceKeys,
      logger,
      limits: config.limits,
      healthTimeoutMs: config.healthTimeoutMs,
      storeTimeoutMs: config.storeTimeoutMs,
      admission: config.admission,
      separateAdmin: config.admin !== undefined,
      ...stores.options,
      ...(leases && { leases }),
    };
    const gateway = createGatewayOn(options, stores.drivers);
    const recheck = await start(gateway, config, logger);
    const limits = {
      keepAliveTimeoutMs: config.keepAliveTimeoutMs,
      headersTimeoutMs: config.headersTimeoutMs,
      requestTimeoutMs: config.requestTimeoutMs,
      maxConnections: config.maxConnections,
      listenBacklog: config.listenBacklog,
    };
    const serving = await listen("the public listener", () =>
      serve(gateway.app, { host: config.host, port: config.port, acceptors: config.acceptors, ...limits }),
    );
    listening.push(serving);
    const adminAddress = config.admin;
    const admin =
      adminAddress === undefined
        ? undefined
        : await listen("the admin listener", () => serve(gateway.admin, { ...adminAddress, ...limits, acceptors: 1 }));
    // Before the line that says the gateway listens: a SIGTERM sent as soon as it is read (a
    // supervisor, a test) finds the handler in place. The kernel delivers a signal at once, while
    // the code between the line's write and the handler's registration may still be running, and
    // with no handler yet the process dies of it without a drain.
    stopOnSignals({ gateway, serving, admin, recheck, closeAll }, config, logger);
    logger.info(
      {
        version: GATEWAY_VERSION,
        host: serving.host,
        port: serving.port,
        records: options.records !== undefined,
        objects: options.objects !== undefined,
        leases: leases !== undefined,
        ...(admin && { admin: { host: admin.host, port: admin.port } }),
      },
      "listening",
    );
  } catch (err) {
    await Promise.allSettled(listening.map((s) => s.drain(0)));
    await closeAll();
    throw err;
  }
}

/** What closes the backends, in the order they were opened. */
type Closers = (() => Promise<unknown>)[];

/**
 * createGateway's options of each store the configuration has a section for (stores/registry.ts),
 * what closes them added to `closers`, and those stores' drivers: only theirs are loaded.
 */
async function storesOf(
  config: GatewayConfig,
  logger: Logger,
  closers: Closers,
): Promise<{ options: Pick<GatewayOptions, Family>; drivers: StoreDrivers }> {
  const sections: Readonly<Record<string, unknown>> = config;
  const options: Partial<Record<Family, unknown>> = {};
  const drivers: Partial<Record<StoreName, AnyStoreDriver>> = {};
  for (const store of STORES) {
    const section = sections[store.name];
    if (section === undefined) continue;
    const driver = await loadDriver(store);
    drivers[store.name as StoreName] = driver;
    options[store.family] = await driver.fromSection(section, { storeTimeoutMs: config.storeTimeoutMs, logger, closers });
  }
  // Each store's fromSection makes the options createGateway takes for its family (StoreDriver).
  return { options: options as Pick<GatewayOptions, Family>, drivers };
}

/** How long a lock node's connection, once closed at the stop, waits for the node's side of the close. */
const DISCONNECT_TIMEOUT_MS = 100;

/** The lock's Redis clients and options, their closing added to `closers`. */
async function leasesBackend(redisConfig: NonNullable<GatewayConfig["redis"]>, logger: Logger, closers: Closers) {
  // Loaded only when leases are enabled: a gateway without a lock carries no Redis client.
  const { Redis } = await import("ioredis");
  const clients = redisConfig.urls.map((url, node) => {
    // disconnectTimeout: how long a closed connection may wait for the node's side of the close before
    // it is cut; ioredis's 2 s kept the process alive that long after `stopped` with a node paused.
    const redis = new Redis(url, { lazyConnect: false, disconnectTimeout: DISCONNECT_TIMEOUT_MS });
    // A lock node that is down costs its vote, not the process: the lock counts a quorum.
    redis.on("error", (err) => logger.debug({ err, node }, "redis node error"));
    return redis;
  });
  // Closed without QUIT, which a node that does not answer (paused) would never reply to, and which
  // waits in the offline queue for one that is not connected: the lock keeps no state on a connection,
  // and every lease request has settled before the backends close.
  closers.push(() => Promise.resolve(clients.forEach((c) => c.disconnect())));
  const { retryCount, retryDelayMs, retryJitterMs, nodeTimeoutMs, driftFactor, acquireTimeoutMs } = redisConfig;
  return {
    clients,
    redlock: {
      retryCount,
      ...(retryDelayMs === undefined ? {} : { retryDelayMs }),
      ...(retryJitterMs === undefined ? {} : { retryJitterMs }),
      ...(nodeTimeoutMs === undefined ? {} : { nodeTimeoutMs }),
      ...(driftFactor === undefined ? {} : { driftFactor }),
    },
    ...(acquireTimeoutMs === undefined ? {} : { acquireTimeoutMs }),
  };
}

/** What a running gateway stops: its app, its listeners, the background check and the backends. */
interface Running {
  readonly gateway: Gateway;
  readonly serving: Serving;
  readonly admin: Serving | undefined;
  readonly recheck: Recheck | undefined;
  readonly closeAll: () => Promise<unknown>;
}

/** On SIGTERM or SIGINT (the first one), drains the listeners, then closes the backends; the exit code says whether the drain finished. */
function stopOnSignals({ gateway, serving, admin, recheck, closeAll }: Running, config: GatewayConfig, logger: Logger): void {
  let stopping = false;
  const stop = async (signal: string): Promise<void> => {
    if (stopping) return;
    stopping = true;
    const inFlight = serving.inFlight();
    gateway.beginDrain();
    // drain() stops accepting before it returns: whoever reads this line finds the port closed.
    const draining = serving.drain(config.drainTimeoutMs);
    logger.info({ signal, inFlight, timeoutMs: config.drainTimeoutMs }, "draining");
    const drained = await draining;
    // The admin listener answers until the public one is drained: health and metrics watch the drain.
    await admin?.drain(1_000);
    // A lease its client left while it was being granted (the drain cut it) is released before the lock's connections close.
    await gateway.settled();
    // Backends close only after the last request that could use them has finished, and the background check's last look.
    recheck?.stop();
    await recheck?.done;
    await closeAll();
    gateway.close();
    logger.info({ drained }, "stopped");
    process.exitCode = drained ? 0 : 1;
  };
  process.once("SIGTERM", () => void stop("SIGTERM"));
  process.once("SIGINT", () => void stop("SIGINT"));
}

/**
 * A listener that cannot bind (the address in use, also by the other listener on another host
 * string of one port, such as 0.0.0.0 and 127.0.0.1; not an address of this machine; no permission)
 * refuses the start: one line, exit 2.
 */
async function listen(which: string, bind: () => Promise<Serving>): Promise<Serving> {
  try {
    return await bind();
  } catch (err) {
    const { code, address, port } = err as { code?: unknown; address?: unknown; port?: unknown };
    if (typeof code !== "string") throw err;
    throw new StartRefusedError(
      `could not listen on ${String(address)}:${String(port)} (${which}): ${code}; choose another address or port`,
      {
        cause: err,
      },
    );
  }
}

/**
 * The start checks, then the stores' start work (migrate, verify). Checked, a backend that does not
 * answer or is not set up refuses the start (StartRefusedError: exit 2); unchecked, it is logged and
 * the gateway serves, answering 503 until the backend is back.
 */
async function start(gateway: Gateway, config: GatewayConfig, logger: Logger): Promise<Recheck | undefined> {
  try {
    // Each lock node's own answer (none pending): the refusal names exactly the nodes that did not answer.
    if (config.startChecks) refuseUnhealthy(await gateway.health({ everyNode: true }), config.healthTimeoutMs);
    await gateway.prepare({ migrate: config.migrate, verify: config.verify });
    return undefined;
  } catch (err) {
    const refusal = err instanceof StartRefusedError ? err : startRefusal(err);
    if (refusal === undefined) throw err;
    if (config.startChecks) throw refusal;
    logger.warn({ err }, `starting anyway: ${refusal.message}`);
    // Until every store answers set up, GET /readyz says why not, and this looks again (read-only unless migrateInBackground).
    return recheckInBackground(gateway, { intervalMs: RECHECK_INTERVAL_MS, migrate: config.migrate && config.migrateInBackground, logger });
  }
}

const program = gatewayProgram({
  serve(flags) {
    const config = configured(() => loadConfig(flags));
    const logger = pino({ name: "fenced-gateway", level: config.logLevel });
    // npm only warns of `engines` at install, if at all: say it where the operator looks.
    if (SUPPORTED_NODE !== undefined && !nodeSupported(process.version, SUPPORTED_NODE))
      logger.warn(
        { node: process.version, supported: SUPPORTED_NODE },
        `unsupported Node.js ${process.version}: fenced-gateway supports ${SUPPORTED_NODE}`,
      );
    startProcessTracing(flags.otlp === true, process.env, logger)
      .then(() => main(config, logger))
      .catch((err: unknown) => {
        if (err instanceof StartRefusedError) refuse(err.message);
        // The stores and the lock check their options before any I/O: a value the schema let through (a bucket name S3 refuses).
        if (err instanceof InvalidArgumentError) refuse(`invalid configuration: ${err.message}`);
        logger.fatal({ err }, "could not start");
        process.exitCode = 1;
      });
  },
  async sweep(flags, options) {
    const minAgeMs = configured(() => durationMs(options.minAge ?? DEFAULT_MIN_AGE, "--min-age"), "fenced-gateway sweep");
    const config = configured(() => loadSweepConfig(flags), "fenced-gateway sweep");
    process.exitCode = await sweepCommand(config, { minAgeMs, dryRun: options.dryRun === true });
  },
});
await program.parseAsync();

/** The configuration, or one line on stderr and exit code 2. */
function configured<T>(load: () => T, command?: string): T {
  try {
    return load();
  } catch (err) {
    // ConfigurationError (config.ts) names each problem and where it came from; a flag's own check (--min-age) says what is wrong.
    refuse(`invalid configuration: ${err instanceof Error ? err.message : String(err)}`, command);
  }
}

/** One line on stderr and exit code 2: the gateway (or its sweep) will not run as configured. */
function refuse(line: string, command = "fenced-gateway"): never {
  process.stderr.write(`${command}: ${line.replace(/\s*\n\s*/g, " ")}\n`);
  process.exit(2);
}
