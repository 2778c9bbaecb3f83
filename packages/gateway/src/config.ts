import { readFileSync } from "node:fs";
import { z } from "zod";
import { apiKeySchema } from "./auth/api-keys.js";
import { fenceKeySchema } from "./auth/credentials.js";
import { SERVER_DEFAULTS } from "./http/server.js";

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
        retryJitterMs: z.number().min(0).optional(),
        nodeTimeoutMs: z.number().positive().optional(),
        /** How long POST /v1/leases may spend on the lock (routes/leases.ts). */
        acquireTimeoutMs: z.number().int().positive().optional(),
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
    /** A second listener for /healthz and /metrics, which the public port then does not serve. */
    admin: z.strictObject({ host: z.string().min(1).default("127.0.0.1"), port: z.number().int().min(0).max(65_535) }).optional(),
    /** The deadline of every call into a store (FencedPostgres/FencedS3 `timeoutMs`). */
    storeTimeoutMs: z.number().int().min(100).max(600_000).default(5_000), // the stores' own bounds
    /** Refuse to start when a configured backend does not answer or is not set up (ops/start-checks.ts). */
    startChecks: z.boolean().default(true),
    drainTimeoutMs: z.number().int().min(0).default(30_000),
    // The HTTP server's limits (http/server.ts states what each bounds).
    keepAliveTimeoutMs: z.number().int().min(0).default(SERVER_DEFAULTS.keepAliveTimeoutMs),
    headersTimeoutMs: z.number().int().positive().default(SERVER_DEFAULTS.headersTimeoutMs),
    requestTimeoutMs: z.number().int().positive().default(SERVER_DEFAULTS.requestTimeoutMs),
    maxConnections: z.number().int().positive().default(SERVER_DEFAULTS.maxConnections),
    healthTimeoutMs: z.number().int().positive().default(2_000),
    logLevel: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  })
  // Two listeners cannot share an address: the second would fail to bind after the first started. Only
  // the same host string is seen here; 0.0.0.0 and 127.0.0.1 on one port fail at listen (cli.ts: exit 2).
  .refine((c) => c.admin === undefined || c.admin.port === 0 || c.admin.port !== c.port || c.admin.host !== c.host, {
    path: ["admin", "port"],
    message: "the admin listener needs an address of its own (another port than the public one)",
  })
  // Node refuses a server whose header deadline is past its request deadline.
  .refine((c) => c.headersTimeoutMs <= c.requestTimeoutMs, {
    path: ["headersTimeoutMs"],
    message: "must not be longer than requestTimeoutMs (the headers are part of the request)",
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
  readonly adminHost?: string;
  readonly adminPort?: string;
  readonly storeTimeoutMs?: string;
  readonly redisNodeTimeoutMs?: string;
  readonly acquireTimeoutMs?: string;
  readonly keepAliveTimeoutMs?: string;
  readonly headersTimeoutMs?: string;
  readonly requestTimeoutMs?: string;
  readonly maxConnections?: string;
  /** commander's --no-migrate / --no-verify / --no-start-checks */
  readonly migrate?: boolean;
  readonly verify?: boolean;
  readonly startChecks?: boolean;
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
    redis: {
      urls: list(e("REDIS_URLS")),
      nodeTimeoutMs: num(e("REDIS_NODE_TIMEOUT_MS")),
      acquireTimeoutMs: num(e("ACQUIRE_TIMEOUT_MS")),
    },
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
    ...serverFields((name) => e(name)),
    startChecks: bool(e("START_CHECKS")),
  });
}

/** The settings that read alike from FENCED_GATEWAY_<NAME> and --<name>. */
function serverFields(get: (name: string) => string | undefined): Raw {
  return {
    admin: { host: get("ADMIN_HOST"), port: num(get("ADMIN_PORT")) },
    storeTimeoutMs: num(get("STORE_TIMEOUT_MS")),
    keepAliveTimeoutMs: num(get("KEEP_ALIVE_TIMEOUT_MS")),
    headersTimeoutMs: num(get("HEADERS_TIMEOUT_MS")),
    requestTimeoutMs: num(get("REQUEST_TIMEOUT_MS")),
    maxConnections: num(get("MAX_CONNECTIONS")),
  };
}

/** "false"/"0"/"no" and "true"/"1"/"yes"; anything else stays a string, which the schema reports by name. */
function bool(value: string | undefined): boolean | string | undefined {
  if (value === undefined || value.trim() === "") return undefined;
  const v = value.trim().toLowerCase();
  return ["true", "1", "yes"].includes(v) ? true : ["false", "0", "no"].includes(v) ? false : value;
}

function fromFlags(f: ConfigFlags): Raw {
  return defined({
    host: f.host,
    port: num(f.port),
    redis: { urls: list(f.redis), nodeTimeoutMs: num(f.redisNodeTimeoutMs), acquireTimeoutMs: num(f.acquireTimeoutMs) },
    postgres: { url: f.postgres, schema: f.postgresSchema, poolSize: num(f.postgresPoolSize) },
    s3: { endpoint: f.s3Endpoint, region: f.s3Region, bucket: f.s3Bucket, prefix: f.s3Prefix },
    migrate: f.migrate === false ? false : undefined,
    verify: f.verify === false ? false : undefined,
    startChecks: f.startChecks === false ? false : undefined,
    ...serverFields((name) => {
      // ADMIN_HOST → adminHost: the flags are the variables' names in camel case.
      const flag = name.toLowerCase().replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()) as keyof ConfigFlags;
      const value = f[flag];
      return typeof value === "string" ? value : undefined;
    }),
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
  const merged = merge(merge(file, fromEnv(env)), fromFlags(flags));
  for (const section of SECTIONS) requireWhole(section, merged, file, env, flags);
  return configSchema.parse(merged);
}

/** The field without which a backend's section means nothing, and where it can be given. */
const SECTIONS = [
  { name: "s3", field: "bucket", variable: "FENCED_GATEWAY_S3_BUCKET", flag: "--s3-bucket", prefix: "s3" },
  { name: "postgres", field: "url", variable: "FENCED_GATEWAY_POSTGRES_URL", flag: "--postgres", prefix: "postgres" },
  { name: "redis", field: "urls", variable: "FENCED_GATEWAY_REDIS_URLS", flag: "--redis", prefix: "redis" },
] as const;

/**
 * A backend's options given without the one field that enables it (S3 credentials in the
 * environment, no bucket): the error names what was given and where the missing field goes, instead
 * of the schema's "s3.bucket: Invalid input".
 */
function requireWhole(section: (typeof SECTIONS)[number], merged: Raw, file: Raw, env: NodeJS.ProcessEnv, flags: ConfigFlags): void {
  const given = merged[section.name];
  if (typeof given !== "object" || given === null || section.field in given) return;
  const variablePrefix = `FENCED_GATEWAY_${section.name.toUpperCase()}_`;
  const sources = [
    ...Object.keys(env).filter((name) => name.startsWith(variablePrefix) && env[name] !== undefined && env[name] !== ""),
    ...Object.keys(flags)
      .filter((flag) => flag.startsWith(section.prefix) && flags[flag as keyof ConfigFlags] !== undefined)
      .map((flag) => `--${flag.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`),
    ...(typeof file[section.name] === "object" ? [`${section.name} in the config file`] : []),
  ];
  throw new Error(
    `${section.name}.${section.field} is missing: ${sources.join(", ")} ${sources.length === 1 ? "is" : "are"} set, which ` +
      `need${sources.length === 1 ? "s" : ""} ${section.variable} (or ${section.flag}, or ${section.name}.${section.field} in the config file)`,
  );
}
