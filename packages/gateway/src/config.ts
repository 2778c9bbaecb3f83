import { readFileSync } from "node:fs";
import { z } from "zod";
import { apiKeySchema } from "./auth/api-keys.js";
import { fenceKeySchema } from "./auth/credentials.js";

/**
 * The gateway's configuration. Sources, later ones winning: a JSON file (--config or
 * FENCED_GATEWAY_CONFIG), environment variables, command-line flags. API keys and S3 credentials come
 * only from the file or the environment: a command line is visible to every user of the machine.
 */
export const configSchema = z
  .strictObject({
    host: z.string().min(1).default("127.0.0.1"),
    port: z.number().int().min(0).max(65_535).default(8080),
    apiKeys: z.array(apiKeySchema).min(1, "at least one API key is needed (apiKeys in the config file, or FENCED_GATEWAY_API_KEYS)"),
    /** Fence credential keys, the signing one first (config file or FENCED_GATEWAY_FENCE_KEYS only). */
    fenceKeys: z.array(fenceKeySchema).optional(),
    redis: z
      .strictObject({
        urls: z.array(z.string().regex(/^rediss?:\/\//, "a redis:// or rediss:// URL")).min(1),
        retryCount: z.number().int().min(0).max(1_000).default(0),
        retryDelayMs: z.number().min(0).optional(),
        nodeTimeoutMs: z.number().positive().optional(),
        driftFactor: z.number().min(0).max(0.5).optional(),
      })
      .optional(),
    postgres: z
      .strictObject({
        url: z.string().min(1),
        schema: z.string().optional(),
        poolSize: z.number().int().min(1).max(1_000).default(16),
      })
      .optional(),
    s3: z
      .strictObject({
        bucket: z.string().min(1),
        endpoint: z.string().url().optional(),
        region: z.string().min(1).default("us-east-1"),
        prefix: z.string().optional(),
        accessKeyId: z.string().min(1).optional(),
        secretAccessKey: z.string().min(1).optional(),
        forcePathStyle: z.boolean().default(true),
        inlineLimit: z.number().int().min(0).optional(),
        checkResourceFence: z.boolean().optional(),
        partSize: z.number().int().optional(),
      })
      .refine(
        (s) => (s.accessKeyId === undefined) === (s.secretAccessKey === undefined),
        "give both accessKeyId and secretAccessKey, or neither (the AWS default chain)",
      )
      .optional(),
    limits: z
      .strictObject({
        recordBytes: z.number().int().positive().optional(),
        objectBytes: z.number().int().min(0).optional(),
        maxTtlMs: z.number().int().positive().optional(),
      })
      .default({}),
    /** Create the Postgres tables at start (idempotent). */
    migrate: z.boolean().default(true),
    /** Prove at start that the S3 backend refuses stale conditional writes (FencedS3.verify). */
    verify: z.boolean().default(true),
    drainTimeoutMs: z.number().int().min(0).default(30_000),
    keepAliveTimeoutMs: z.number().int().min(0).default(5_000),
    requestTimeoutMs: z.number().int().min(0).default(600_000),
    healthTimeoutMs: z.number().int().positive().default(2_000),
    logLevel: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  })
  .refine((c) => c.redis === undefined || (c.fenceKeys ?? []).length > 0, {
    path: ["fenceKeys"],
    message:
      "leases (redis) need fence keys: the gateway seals every lease id and fence credential with them (fenceKeys in the config file, or FENCED_GATEWAY_FENCE_KEYS)",
  });

export type GatewayConfig = z.output<typeof configSchema>;

/** Flags as commander hands them over (cli.ts); every one optional. */
export interface ConfigFlags {
  readonly config?: string;
  readonly host?: string;
  readonly port?: string;
  readonly redis?: string;
  readonly postgres?: string;
  readonly postgresSchema?: string;
  readonly postgresPoolSize?: string;
  readonly s3Endpoint?: string;
  readonly s3Region?: string;
  readonly s3Bucket?: string;
  readonly s3Prefix?: string;
  readonly maxRecordBytes?: string;
  readonly maxObjectBytes?: string;
  readonly maxTtlMs?: string;
  readonly drainTimeoutMs?: string;
  readonly logLevel?: string;
  /** commander's --no-migrate / --no-verify */
  readonly migrate?: boolean;
  readonly verify?: boolean;
}

type Raw = Record<string, unknown>;

/** A number where one was given; a non-number stays a string so that the schema reports it by name. */
function num(value: string | undefined): number | string | undefined {
  if (value === undefined || value.trim() === "") return undefined;
  const n = Number(value);
  return Number.isFinite(n) ? n : value;
}

function list(value: string | undefined): string[] | undefined {
  return value === undefined
    ? undefined
    : value
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s !== "");
}

/** Drops undefined leaves, so that an unset variable never overrides a value from an earlier source. */
function defined(raw: Raw): Raw {
  const out: Raw = {};
  for (const [k, v] of Object.entries(raw)) {
    if (v === undefined) continue;
    if (typeof v === "object" && v !== null && !Array.isArray(v)) {
      const inner = defined(v as Raw);
      if (Object.keys(inner).length > 0) out[k] = inner;
    } else out[k] = v;
  }
  return out;
}

/** Objects merge key by key; arrays and scalars replace. */
function merge(base: Raw, over: Raw): Raw {
  const out: Raw = { ...base };
  for (const [k, v] of Object.entries(over)) {
    const b = out[k];
    const isObject = (x: unknown): x is Raw => typeof x === "object" && x !== null && !Array.isArray(x);
    out[k] = isObject(b) && isObject(v) ? merge(b, v) : v;
  }
  return out;
}

function jsonVariable(env: NodeJS.ProcessEnv, name: string, what: string): unknown {
  const text = env[name];
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`${name} must be a JSON array of ${what}`);
  }
}

function fromEnv(env: NodeJS.ProcessEnv): Raw {
  const e = (name: string): string | undefined => env[`FENCED_GATEWAY_${name}`];
  return defined({
    host: e("HOST"),
    port: num(e("PORT")),
    apiKeys: jsonVariable(env, "FENCED_GATEWAY_API_KEYS", "API keys"),
    fenceKeys: jsonVariable(env, "FENCED_GATEWAY_FENCE_KEYS", "fence keys ({ id, secret })"),
    redis: { urls: list(e("REDIS_URLS")) },
    postgres: { url: e("POSTGRES_URL"), schema: e("POSTGRES_SCHEMA"), poolSize: num(e("POSTGRES_POOL_SIZE")) },
    s3: {
      endpoint: e("S3_ENDPOINT"),
      region: e("S3_REGION"),
      bucket: e("S3_BUCKET"),
      prefix: e("S3_PREFIX"),
      accessKeyId: e("S3_ACCESS_KEY_ID"),
      secretAccessKey: e("S3_SECRET_ACCESS_KEY"),
    },
    limits: { recordBytes: num(e("MAX_RECORD_BYTES")), objectBytes: num(e("MAX_OBJECT_BYTES")), maxTtlMs: num(e("MAX_TTL_MS")) },
    drainTimeoutMs: num(e("DRAIN_TIMEOUT_MS")),
    logLevel: e("LOG_LEVEL"),
  });
}

function fromFlags(f: ConfigFlags): Raw {
  return defined({
    host: f.host,
    port: num(f.port),
    redis: { urls: list(f.redis) },
    postgres: { url: f.postgres, schema: f.postgresSchema, poolSize: num(f.postgresPoolSize) },
    s3: { endpoint: f.s3Endpoint, region: f.s3Region, bucket: f.s3Bucket, prefix: f.s3Prefix },
    migrate: f.migrate === false ? false : undefined,
    verify: f.verify === false ? false : undefined,
    limits: { recordBytes: num(f.maxRecordBytes), objectBytes: num(f.maxObjectBytes), maxTtlMs: num(f.maxTtlMs) },
    drainTimeoutMs: num(f.drainTimeoutMs),
    logLevel: f.logLevel,
  });
}

/** Reads and validates the configuration; throws a ZodError naming every bad field. */
export function loadConfig(
  flags: ConfigFlags,
  env: NodeJS.ProcessEnv = process.env,
  readFile: (path: string) => string = (p) => readFileSync(p, "utf8"),
): GatewayConfig {
  const path = flags.config ?? env.FENCED_GATEWAY_CONFIG;
  let file: Raw = {};
  if (path !== undefined && path !== "") {
    const parsed: unknown = JSON.parse(readFile(path));
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
      throw new Error(`${path}: the config file must hold a JSON object`);
    file = parsed as Raw;
  }
  return configSchema.parse(merge(merge(file, fromEnv(env)), fromFlags(flags)));
}
