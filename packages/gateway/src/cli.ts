#!/usr/bin/env node
import { S3Client } from "@aws-sdk/client-s3";
import { Command, Option } from "commander";
import pg from "pg";
import { pino, type Logger } from "pino";
import { ZodError } from "zod";
import { InvalidArgumentError } from "@fenced/fence";
import { createGateway, type Gateway } from "./app.js";
import { loadConfig, type ConfigFlags, type GatewayConfig } from "./config.js";
import { serve, type Serving } from "./http/server.js";
import { refuseUnhealthy, StartRefusedError, startRefusal } from "./ops/start-checks.js";

const program = new Command("fenced-gateway")
  .description("HTTP gateway to fenced Postgres records, fenced S3 objects and Redlock leases with fencing tokens")
  .addOption(new Option("-c, --config <file>", "JSON config file").env("FENCED_GATEWAY_CONFIG"))
  .option("--host <host>", "listen address (default 127.0.0.1)")
  .option("-p, --port <port>", "listen port, 0 for any free one (default 8080)")
  .option("--redis <urls>", "comma-separated redis:// URLs of the independent lock nodes (enables /v1/leases)")
  .option("--postgres <url>", "PostgreSQL connection string (enables /v1/records)")
  .option("--postgres-schema <name>", "schema of the fence and records tables (default fenced)")
  .option("--postgres-pool-size <n>", "connections to PostgreSQL (default 16)")
  .option("--s3-endpoint <url>", "S3 endpoint (default: AWS)")
  .option("--s3-region <region>", "S3 region (default us-east-1)")
  .option("--s3-bucket <bucket>", "bucket (enables /v1/objects)")
  .option("--s3-prefix <prefix>", "prefix of every object the store writes (default fenced/)")
  .option("--max-record-bytes <n>", "largest JSON record body (default 1 MiB)")
  .option("--max-object-bytes <n>", "largest object body (default 5 GiB)")
  .option("--max-ttl-ms <n>", "longest lease a client may ask for (default 1 h)")
  .option("--admin-host <host>", "address of the admin listener (default 127.0.0.1)")
  .option("--admin-port <port>", "serve /healthz and /metrics on this port, and not on the public one")
  .option("--store-timeout-ms <n>", "deadline of each call into PostgreSQL or S3; past it the request answers 503 (default 5 s)")
  .option("--redis-node-timeout-ms <n>", "how long one lock node may take to answer (default 200 ms)")
  .option("--acquire-timeout-ms <n>", "how long POST /v1/leases may spend on the lock (default 2 s)")
  .option("--keep-alive-timeout-ms <n>", "idle keep-alive connections close after this; above the load balancer's (default 65 s)")
  .option("--headers-timeout-ms <n>", "longest time to receive a request's headers (default 10 s)")
  .option("--request-timeout-ms <n>", "longest time to receive a whole request, body included (default 10 min)")
  .option("--max-connections <n>", "open connections at most; more are closed at once (default 4096)")
  .option("--drain-timeout-ms <n>", "on SIGTERM, how long in-flight requests may take before they are cut (default 30 s)")
  .option("--log-level <level>", "fatal, error, warn, info, debug (one line per request), trace, silent")
  .option("--no-migrate", "do not create the Postgres tables at start")
  .option("--no-verify", "do not probe the S3 backend's conditional writes at start")
  .option("--no-start-checks", "start even when a backend does not answer or is not set up at start")
  .addHelpText(
    "after",
    "\nAPI keys and S3 credentials come from the config file or the environment (FENCED_GATEWAY_API_KEYS, FENCED_GATEWAY_S3_*), never from flags." +
      "\nMost flags have a FENCED_GATEWAY_* variable too (--store-timeout-ms: FENCED_GATEWAY_STORE_TIMEOUT_MS; --no-start-checks: FENCED_GATEWAY_START_CHECKS=false)." +
      "\nExit codes: 2 for a configuration, a backend or a listen address that refuses the start (one line on stderr), 1 for any other failure.",
  );

async function main(config: GatewayConfig, logger: Logger): Promise<void> {
  const closers: (() => Promise<unknown>)[] = [];
  const closeAll = () => Promise.allSettled(closers.map((close) => close()));
  // Listening already when a later step fails (an admin port in use): closed before the backends.
  const listening: Serving[] = [];
  try {
    let records;
    if (config.postgres !== undefined) {
      const pool = new pg.Pool({
        connectionString: config.postgres.url,
        max: config.postgres.poolSize,
        connectionTimeoutMillis: config.storeTimeoutMs,
      });
      // An idle connection the server drops emits 'error' on the pool; unhandled, it would end the process.
      pool.on("error", (err) => logger.warn({ err }, "postgres connection lost"));
      // And every connection keeps a listener of its own for its whole life: pg emits 'error' on a
      // client whose server ends its session (57P01 when PostgreSQL stops), and an error emitted at a
      // moment neither the pool nor a store call listens must not end the process either.
      pool.on("connect", (client) => client.on("error", (err) => logger.debug({ err }, "postgres connection error")));
      closers.push(() => pool.end());
      records = { pool, ...(config.postgres.schema === undefined ? {} : { schema: config.postgres.schema }) };
    }
    let objects;
    if (config.s3 !== undefined) {
      const { bucket, endpoint, region, prefix, accessKeyId, secretAccessKey, forcePathStyle, inlineLimit, checkResourceFence, partSize } =
        config.s3;
      const client = new S3Client({
        region,
        forcePathStyle,
        ...(endpoint === undefined ? {} : { endpoint }),
        ...(accessKeyId === undefined || secretAccessKey === undefined ? {} : { credentials: { accessKeyId, secretAccessKey } }),
        // Streamed bodies of unknown length need no checksum trailer (radosgw answers such requests with 411).
        requestChecksumCalculation: "WHEN_REQUIRED",
        responseChecksumValidation: "WHEN_REQUIRED",
      });
      closers.push(() => Promise.resolve(client.destroy()));
      objects = {
        client,
        bucket,
        ...(prefix === undefined ? {} : { prefix }),
        ...(inlineLimit === undefined ? {} : { inlineLimit }),
        ...(checkResourceFence === undefined ? {} : { checkResourceFence }),
        ...(partSize === undefined ? {} : { partSize }),
      };
    }
    let leases;
    if (config.redis !== undefined) {
      // Loaded only when leases are enabled: a gateway without a lock carries no Redis client.
      const { Redis } = await import("ioredis");
      const clients = config.redis.urls.map((url, node) => {
        const redis = new Redis(url, { lazyConnect: false });
        // A lock node that is down costs its vote, not the process: the lock counts a quorum.
        redis.on("error", (err) => logger.debug({ err, node }, "redis node error"));
        return redis;
      });
      // QUIT to a node that is not connected would wait in the offline queue through every reconnection attempt.
      closers.push(() =>
        Promise.all(clients.map((c) => (c.status === "ready" ? c.quit().catch(() => c.disconnect()) : Promise.resolve(c.disconnect())))),
      );
      const { retryCount, retryDelayMs, retryJitterMs, nodeTimeoutMs, driftFactor, acquireTimeoutMs } = config.redis;
      leases = {
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
    const gateway = createGateway({
      apiKeys: config.apiKeys,
      fenceKeys: config.fenceKeys,
      logger,
      limits: config.limits,
      healthTimeoutMs: config.healthTimeoutMs,
      storeTimeoutMs: config.storeTimeoutMs,
      separateAdmin: config.admin !== undefined,
      ...(records && { records }),
      ...(objects && { objects }),
      ...(leases && { leases }),
    });
    await start(gateway, config, logger);
    const limits = {
      keepAliveTimeoutMs: config.keepAliveTimeoutMs,
      headersTimeoutMs: config.headersTimeoutMs,
      requestTimeoutMs: config.requestTimeoutMs,
      maxConnections: config.maxConnections,
    };
    const serving = await listen("the public listener", () => serve(gateway.app, { host: config.host, port: config.port, ...limits }));
    listening.push(serving);
    const adminAddress = config.admin;
    const admin =
      adminAddress === undefined
        ? undefined
        : await listen("the admin listener", () => serve(gateway.admin, { ...adminAddress, ...limits }));
    logger.info(
      {
        host: serving.host,
        port: serving.port,
        records: records !== undefined,
        objects: objects !== undefined,
        leases: leases !== undefined,
        ...(admin && { admin: { host: admin.host, port: admin.port } }),
      },
      "listening",
    );

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
      // Backends close only after the last request that could use them has finished.
      await closeAll();
      logger.info({ drained }, "stopped");
      process.exitCode = drained ? 0 : 1;
    };
    process.once("SIGTERM", () => void stop("SIGTERM"));
    process.once("SIGINT", () => void stop("SIGINT"));
  } catch (err) {
    await Promise.allSettled(listening.map((s) => s.drain(0)));
    await closeAll();
    throw err;
  }
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
async function start(gateway: Gateway, config: GatewayConfig, logger: Logger): Promise<void> {
  try {
    if (config.startChecks) refuseUnhealthy(await gateway.health(), config.healthTimeoutMs);
    await gateway.prepare({ migrate: config.migrate, verify: config.verify });
  } catch (err) {
    const refusal = err instanceof StartRefusedError ? err : startRefusal(err);
    if (refusal === undefined) throw err;
    if (config.startChecks) throw refusal;
    logger.warn({ err }, `starting anyway: ${refusal.message}`);
  }
}

program.parse();
const flags = program.opts<ConfigFlags>();
let config: GatewayConfig;
try {
  config = loadConfig(flags);
} catch (err) {
  const detail =
    err instanceof ZodError
      ? err.issues.map((i) => `${i.path.join(".") || "(config)"}: ${i.message}`).join("; ")
      : err instanceof Error
        ? err.message
        : String(err);
  refuse(`invalid configuration: ${detail}`);
}
const logger = pino({ name: "fenced-gateway", level: config.logLevel });
main(config, logger).catch((err: unknown) => {
  if (err instanceof StartRefusedError) refuse(err.message);
  // The stores and the lock check their options before any I/O: a value the schema let through (a bucket name S3 refuses).
  if (err instanceof InvalidArgumentError) refuse(`invalid configuration: ${err.message}`);
  logger.fatal({ err }, "could not start");
  process.exitCode = 1;
});

/** One line on stderr and exit code 2: the gateway will not start as configured. */
function refuse(line: string): never {
  process.stderr.write(`fenced-gateway: ${line.replace(/\s*\n\s*/g, " ")}\n`);
  process.exit(2);
}
