#!/usr/bin/env node
import { S3Client } from "@aws-sdk/client-s3";
import { Command, Option } from "commander";
import pg from "pg";
import { pino, type Logger } from "pino";
import { ZodError } from "zod";
import { createGateway } from "./app.js";
import { loadConfig, type ConfigFlags, type GatewayConfig } from "./config.js";
import { serve } from "./http/server.js";

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
  .option("--drain-timeout-ms <n>", "on SIGTERM, how long in-flight requests may take before they are cut (default 30 s)")
  .option("--log-level <level>", "fatal, error, warn, info, debug (one line per request), trace, silent")
  .option("--no-migrate", "do not create the Postgres tables at start")
  .option("--no-verify", "do not probe the S3 backend's conditional writes at start")
  .addHelpText(
    "after",
    "\nAPI keys and S3 credentials come from the config file or the environment (FENCED_GATEWAY_API_KEYS, FENCED_GATEWAY_S3_*), never from flags.",
  );

async function main(config: GatewayConfig, logger: Logger): Promise<void> {
  const closers: (() => Promise<unknown>)[] = [];
  const closeAll = () => Promise.allSettled(closers.map((close) => close()));
  try {
    let records;
    if (config.postgres !== undefined) {
      const pool = new pg.Pool({ connectionString: config.postgres.url, max: config.postgres.poolSize, connectionTimeoutMillis: 5_000 });
      // An idle connection the server drops emits 'error' on the pool; unhandled, it would end the process.
      pool.on("error", (err) => logger.warn({ err }, "postgres connection lost"));
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
      closers.push(() => Promise.all(clients.map((c) => c.quit().catch(() => c.disconnect()))));
      const { retryCount, retryDelayMs, nodeTimeoutMs, driftFactor } = config.redis;
      leases = {
        clients,
        redlock: {
          retryCount,
          ...(retryDelayMs === undefined ? {} : { retryDelayMs }),
          ...(nodeTimeoutMs === undefined ? {} : { nodeTimeoutMs }),
          ...(driftFactor === undefined ? {} : { driftFactor }),
        },
      };
    }
    const gateway = createGateway({
      apiKeys: config.apiKeys,
      fenceKeys: config.fenceKeys,
      logger,
      limits: config.limits,
      healthTimeoutMs: config.healthTimeoutMs,
      ...(records && { records }),
      ...(objects && { objects }),
      ...(leases && { leases }),
    });
    await gateway.prepare({ migrate: config.migrate, verify: config.verify });
    const serving = await serve(gateway.app, {
      host: config.host,
      port: config.port,
      keepAliveTimeoutMs: config.keepAliveTimeoutMs,
      requestTimeoutMs: config.requestTimeoutMs,
    });
    logger.info(
      {
        host: serving.host,
        port: serving.port,
        records: records !== undefined,
        objects: objects !== undefined,
        leases: leases !== undefined,
      },
      "listening",
    );

    let stopping = false;
    const stop = async (signal: string): Promise<void> => {
      if (stopping) return;
      stopping = true;
      const inFlight = serving.inFlight();
      // drain() stops accepting before it returns: whoever reads this line finds the port closed.
      const draining = serving.drain(config.drainTimeoutMs);
      logger.info({ signal, inFlight, timeoutMs: config.drainTimeoutMs }, "draining");
      const drained = await draining;
      // Backends close only after the last request that could use them has finished.
      await closeAll();
      logger.info({ drained }, "stopped");
      process.exitCode = drained ? 0 : 1;
    };
    process.once("SIGTERM", () => void stop("SIGTERM"));
    process.once("SIGINT", () => void stop("SIGINT"));
  } catch (err) {
    await closeAll();
    throw err;
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
      ? err.issues.map((i) => `${i.path.join(".") || "(config)"}: ${i.message}`).join("\n  ")
      : err instanceof Error
        ? err.message
        : String(err);
  process.stderr.write(`fenced-gateway: invalid configuration\n  ${detail}\n`);
  process.exit(2);
}
const logger = pino({ name: "fenced-gateway", level: config.logLevel });
main(config, logger).catch((err: unknown) => {
  logger.fatal({ err }, "could not start");
  process.exitCode = 1;
});
