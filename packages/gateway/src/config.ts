import { readFileSync } from "node:fs";
import { DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS, MIN_TIMEOUT_MS } from "@fenced/store/internal";
import { z } from "zod";
import { admissionSchema } from "./admission/gate.js";
import { apiKeySchema, distinctApiKeys } from "./auth/api-keys.js";
import { fenceKeySchema } from "./auth/credentials.js";
import { SERVER_DEFAULTS } from "./http/server.js";
import { STORE_SECTIONS, STORES } from "./stores/registry.js";
import { configIssues, ConfigurationError, type ConfigSources } from "./config-issues.js";
import { CONFIG_VARIABLE, enabledBy, fromEnv, fromFlags, givenFor, type ConfigFlags, type Raw } from "./settings.js";

export type { ConfigFlags } from "./settings.js";

/**
 * The gateway's configuration. Sources, later ones winning: a JSON file (--config or
 * FENCED_GATEWAY_CONFIG), environment variables, command-line flags (settings.ts says which field
 * has which). API keys, fence keys and S3 credentials come only from the file or the environment: a
 * command line is visible to every user of the machine. Every field carries its description, which
 * `--help` prints and the README must mention (docs.test.ts).
 */
const fields = {
  host: z.string().min(1).default("127.0.0.1").describe("address of the public listener (default 127.0.0.1)"),
  port: z.number().int().min(0).max(65_535).default(8080).describe("port of the public listener, 0 for any free one (default 8080)"),
  apiKeys: z
    .array(apiKeySchema)
    .min(1, "at least one API key is needed (apiKeys in the config file, or FENCED_GATEWAY_API_KEYS)")
    .superRefine(distinctApiKeys)
    .describe("the API keys, a JSON array of { id, key or sha256, resources, keys, readOnly?, trustedLockClient? } (required)"),
  fenceKeys: z
    .array(fenceKeySchema)
    .optional()
    .describe(
      "keys that seal fence credentials and lease ids, a JSON array of { id, secret }: the first signs, all verify (required with redis)",
    ),
  redis: z
    .strictObject({
      urls: z
        .array(z.string().regex(/^rediss?:\/\//, "must be a redis:// or rediss:// URL"))
        .min(1)
        .describe("the independent lock nodes, redis:// or rediss:// URLs, comma-separated as a flag or variable (enables /v1/leases)"),
      retryCount: z
        .number()
        .int()
        .min(0)
        .max(1_000)
        .default(0)
        .describe("retries of a held lock within acquireTimeoutMs (default 0: answer 409 at once)"),
      retryDelayMs: z.number().min(0).optional().describe("delay between those retries (default 200)"),
      retryJitterMs: z.number().min(0).optional().describe("random extra delay added to each retry (default 100)"),
      nodeTimeoutMs: z.number().positive().optional().describe("how long one lock node may take to answer (default 200)"),
      /** How long POST /v1/leases may spend on the lock (routes/leases.ts). */
      acquireTimeoutMs: z
        .number()
        .int()
        .positive()
        .optional()
        .describe("how long POST /v1/leases may spend on the lock, at least three rounds of nodeTimeoutMs (default 2000)"),
      driftFactor: z
        .number()
        .min(0)
        .max(0.5)
        .optional()
        .describe("clock drift allowance, a fraction of the TTL taken off a lease's validity (default 0.01)"),
    })
    .optional(),
  // Each store's section (stores/registry.ts): `postgres`, `s3`.
  ...STORE_SECTIONS,
  limits: z
    .strictObject({
      recordBytes: z.number().int().positive().optional().describe("largest JSON record body in bytes (default 1 MiB)"),
      objectBytes: z.number().int().min(0).optional().describe("largest object body in bytes (default 5 GiB)"),
      maxTtlMs: z.number().int().positive().optional().describe("longest lease a client may ask for (default 1 h)"),
    })
    .default({}),
  /** Create the Postgres tables at start (idempotent). */
  migrate: z.boolean().default(true).describe("create or upgrade the PostgreSQL tables at start (default true)"),
  /** With startChecks off, a start whose migrate failed is re-checked in the background (ops/recheck.ts): may that check migrate? */
  migrateInBackground: z
    .boolean()
    .default(false)
    .describe(
      "with startChecks off, once PostgreSQL answers, create its tables from the background re-check (default false: the re-check only reads, and /readyz says 503 until they exist)",
    ),
  /** Prove at start that the S3 backend refuses stale conditional writes (its store's verify()). */
  verify: z.boolean().default(true).describe("prove at start that the S3 backend refuses stale conditional writes (default true)"),
  /** A second listener for /healthz and /metrics, which the public port then does not serve. */
  admin: z
    .strictObject({
      host: z.string().min(1).default("127.0.0.1").describe("address of the admin listener (default 127.0.0.1: this machine only)"),
      port: z.number().int().min(0).max(65_535).describe("serve /healthz and /metrics on this port, and not on the public one"),
    })
    .optional(),
  /** The deadline of every call into a store (the stores' `timeoutMs`). */
  storeTimeoutMs: z
    .number()
    .int()
    .min(MIN_TIMEOUT_MS) // the stores' own bounds
    .max(MAX_TIMEOUT_MS)
    .default(DEFAULT_TIMEOUT_MS)
    .describe(`deadline of each call into PostgreSQL or S3; past it the request answers 503 (default ${DEFAULT_TIMEOUT_MS})`),
  /** Refuse to start when a configured backend does not answer or is not set up (ops/start-checks.ts). */
  startChecks: z.boolean().default(true).describe("refuse to start when a backend does not answer or is not set up (default true)"),
  drainTimeoutMs: z
    .number()
    .int()
    .min(0)
    .default(30_000)
    .describe("on SIGTERM, how long requests in flight may take before they are cut (default 30000)"),
  // The HTTP server's limits (http/server.ts states what each bounds).
  keepAliveTimeoutMs: z
    .number()
    .int()
    .min(0)
    .default(SERVER_DEFAULTS.keepAliveTimeoutMs)
    .describe("idle keep-alive connections close after this; keep it above the load balancer's (default 65000)"),
  headersTimeoutMs: z
    .number()
    .int()
    .positive()
    .default(SERVER_DEFAULTS.headersTimeoutMs)
    .describe("longest time to receive a request's headers (default 10000)"),
  requestTimeoutMs: z
    .number()
    .int()
    .positive()
    .default(SERVER_DEFAULTS.requestTimeoutMs)
    .describe("longest time to receive a whole request, body included (default 600000)"),
  maxConnections: z
    .number()
    .int()
    .positive()
    .default(SERVER_DEFAULTS.maxConnections)
    .describe("open connections at most; more are closed as they arrive (default 4096)"),
  listenBacklog: z
    .number()
    .int()
    .positive()
    .max(65_535)
    .default(SERVER_DEFAULTS.listenBacklog)
    .describe("connections waiting to be accepted at most, capped by the kernel's net.core.somaxconn (default 4096)"),
  acceptors: z
    .number()
    .int()
    .positive()
    .max(256)
    .default(SERVER_DEFAULTS.acceptors)
    .describe(
      "listening sockets on the port, each accepting a connection on every turn of the event loop; more than 1 on Linux only (default 1)",
    ),
  healthTimeoutMs: z
    .number()
    .int()
    .positive()
    .default(2_000)
    .describe("deadline of each backend's check in /healthz and at start (default 2000)"),
  /** Admission control under overload (admission/gate.ts). */
  admission: admissionSchema.prefault({}).describe("admission control: refuse early under overload (503 overloaded)"),
  logLevel: z
    .enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"])
    .default("info")
    .describe("fatal, error, warn, info (default), debug (one line per request), trace or silent"),
};

/**
 * The fields of the configuration's array items (schemas of their own, in auth/): what `--help`
 * says of each.
 */
const ITEM_FIELDS: Readonly<Record<string, string>> = {
  "apiKeys[].id": "the key's name in logs: 1-64 of A-Z a-z 0-9 . _ -",
  "apiKeys[].key": "the secret itself, 16-256 characters of A-Z a-z 0-9 . _ ~ + / -",
  "apiKeys[].sha256": "or the secret's SHA-256 in hex, so that the file need not hold it",
  "apiKeys[].resources": 'prefixes of the resources it may take leases on, write under and read the fences of ("": all)',
  "apiKeys[].keys": 'prefixes of the record and object keys it may read and write ("": all)',
  "apiKeys[].readOnly": "reads only: writes and leases answer 403 (default false)",
  "apiKeys[].trustedLockClient": "may write with plain Fencing-Token headers instead of a fence credential (default false)",
  "fenceKeys[].id": "the key's id, carried in every credential it signs: 1-64 of A-Z a-z 0-9 _ -",
  "fenceKeys[].secret": "at least 32 random bytes, base64",
};

const configObject = z.strictObject(fields);

/** A field's schema without its optional, default and transform wrappers: the object, array or value inside. */
function bare(schema: z.ZodType): z.ZodType {
  if (schema instanceof z.ZodOptional || schema instanceof z.ZodDefault || schema instanceof z.ZodPrefault)
    return bare(schema.unwrap() as z.ZodType);
  if (schema instanceof z.ZodPipe) return bare(schema.in as z.ZodType);
  return schema;
}

/**
 * Every field of the configuration, dotted (`s3.partSize`), array items' fields as `apiKeys[].id`,
 * each with its description: what `--help` lists. A section (`s3`) is not a field; its fields are.
 */
export function configFields(shape: z.ZodRawShape = fields, prefix = ""): { path: string; description: string }[] {
  return Object.entries(shape).flatMap(([name, schema]) => {
    const path = `${prefix}${name}`;
    const inner = bare(schema as z.ZodType);
    if (inner instanceof z.ZodObject) return configFields(inner.shape, `${path}.`);
    const field = { path, description: (schema as z.ZodType).description ?? "" };
    const item = inner instanceof z.ZodArray ? bare(inner.element as z.ZodType) : undefined;
    if (!(item instanceof z.ZodObject)) return [field];
    const items = Object.keys(item.shape).map((key) => ({ path: `${path}[].${key}`, description: ITEM_FIELDS[`${path}[].${key}`] ?? "" }));
    return [field, ...items];
  });
}

export const configSchema = configObject
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
  })
  // One store per family of routes (stores/registration.ts): two would each claim /v1/records.
  .superRefine((c, ctx) => {
    const sections: Readonly<Record<string, unknown>> = c;
    for (const family of ["records", "objects"] as const) {
      const given = STORES.filter((store) => store.family === family && sections[store.name] !== undefined).map((store) => store.name);
      if (given.length > 1)
        ctx.addIssue({
          code: "custom",
          path: [given[1] as string],
          message: `one store serves /v1/${family}: give the section of one of ${given.join(" and ")}, not both`,
        });
    }
  });

export type GatewayConfig = z.output<typeof configSchema>;

/**
 * What `fenced-gateway sweep` reads: the gateway's own file, variables and flags, checked alike. It
 * serves nothing, so it needs no API keys (a scheduled job need not hold them).
 */
const sweepConfigSchema = configObject.extend({ apiKeys: z.array(apiKeySchema).optional() });

export type SweepConfig = z.output<typeof sweepConfigSchema>;

/** The fields `fenced-gateway sweep` uses (sweep.ts): each store's (its registration says which), the store deadline. */
const SWEEP_FIELDS: readonly string[] = [
  ...STORES.flatMap(({ name, config }) => config.sweepFields.map((field) => (field === "" ? name : `${name}.${field}`))),
  "storeTimeoutMs",
];

/** Whether `fenced-gateway sweep` uses the field at `path` (dotted): its flags are the sweep's, its --help lists them. */
export function sweepUses(path: string): boolean {
  return SWEEP_FIELDS.some((field) => path === field || path.startsWith(`${field}.`));
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

/** Reads and validates the configuration; throws ConfigurationError naming every bad field and where it came from. */
export function loadConfig(
  flags: ConfigFlags,
  env: NodeJS.ProcessEnv = process.env,
  readFile: (path: string) => string = (p) => readFileSync(p, "utf8"),
): GatewayConfig {
  return parse(configSchema, flags, env, readFile);
}

/** The configuration `fenced-gateway sweep` runs with (sweepConfigSchema). */
export function loadSweepConfig(
  flags: ConfigFlags,
  env: NodeJS.ProcessEnv = process.env,
  readFile: (path: string) => string = (p) => readFileSync(p, "utf8"),
): SweepConfig {
  return parse(sweepConfigSchema, flags, env, readFile);
}

/** Every configuration is parsed here: the sources gathered, then the schema, its problems worded by configIssues. */
function parse<S extends z.ZodType>(
  schema: S,
  flags: ConfigFlags,
  env: NodeJS.ProcessEnv,
  readFile: (path: string) => string,
): z.output<S> {
  const sources = gather(flags, env, readFile);
  const merged = merge(merge(sources.file?.raw ?? {}, sources.env), sources.flags);
  for (const section of SECTIONS) requireWhole(section, merged, sources.file?.raw ?? {}, env, flags);
  return configIssues(
    schema,
    merged,
    sources,
    configFields().map((f) => f.path),
  );
}

/** The three sources, each read on its own (merged file < environment < flags by parse()). */
function gather(flags: ConfigFlags, env: NodeJS.ProcessEnv, readFile: (path: string) => string): ConfigSources {
  const path = typeof flags.config === "string" ? flags.config : env[CONFIG_VARIABLE];
  const given = { env: fromEnv(env), flags: fromFlags(flags) };
  return path === undefined || path === "" ? given : { ...given, file: { path, raw: readConfigFile(path, readFile) } };
}

/** The config file's object; an error names the file and what is wrong with it. */
function readConfigFile(path: string, readFile: (path: string) => string): Raw {
  let text: string;
  try {
    text = readFile(path);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    throw new ConfigurationError(`cannot read the config file ${path}${typeof code === "string" ? ` (${code})` : ""}`, { cause: err });
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    // Not JSON.parse's message: it quotes the text around the error, and the file holds secrets.
    throw new ConfigurationError(`the config file ${path} is not valid JSON (\`jq . ${path}\` shows where)`, { cause: err });
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    throw new ConfigurationError(`the config file ${path} must hold a JSON object ({ "apiKeys": [ … ], … })`);
  return parsed as Raw;
}

/** The field without which a backend's section means nothing, and where it can be given: each store's, and the lock's. */
const SECTIONS: readonly Section[] = [
  ...STORES.map((store) => {
    const { field, variable, flag } = enabledBy(store);
    return { name: store.name, field, variable, flag };
  }),
  { name: "redis", field: "urls", variable: "FENCED_GATEWAY_REDIS_URLS", flag: "--redis" },
];

interface Section {
  readonly name: string;
  readonly field: string;
  readonly variable: string;
  readonly flag: string;
}

/**
 * A backend's options given without the one field that enables it (S3 credentials in the
 * environment, no bucket): the error names what was given and where the missing field goes, instead
 * of the schema's "s3.bucket: Invalid input".
 */
function requireWhole(section: Section, merged: Raw, file: Raw, env: NodeJS.ProcessEnv, flags: ConfigFlags): void {
  const given = merged[section.name];
  if (typeof given !== "object" || given === null || section.field in given) return;
  const sources = [
    ...givenFor(section.name, env, flags),
    ...(typeof file[section.name] === "object" ? [`${section.name} in the config file`] : []),
  ];
  throw new ConfigurationError(
    `${section.name}.${section.field} is missing: ${sources.join(", ")} ${sources.length === 1 ? "is" : "are"} set, which ` +
      `need${sources.length === 1 ? "s" : ""} ${section.variable} (or ${section.flag}, or ${section.name}.${section.field} in the config file)`,
  );
}
