import { Option } from "commander";
import { STORES } from "./stores/registry.js";
import type { StoreRegistration } from "./stores/registration.js";

/**
 * Every configuration field that can also be given by environment variable or flag, in one table:
 * config.ts reads the environment and the flags through it, cli-program.ts makes the flags of it and
 * writes both names into `--help`. A field the table does not name is read from the config file only.
 * A store's fields are its registration's (`config.settings`), under its section.
 */
export interface Setting {
  /** The configuration field it sets, dotted (`s3.bucket`). */
  readonly path: string;
  /** Its environment variable; absent: none. */
  readonly variable?: string;
  /** Its flag, as commander declares it; absent for secrets, which never go on a command line (visible to every user of the machine). */
  readonly flag?: string;
  /** How its text is read: as is, a number, a comma-separated list, JSON, or a boolean (true/1/yes, false/0/no). */
  readonly read: "text" | "number" | "list" | "json" | "boolean";
}

export const SETTINGS: readonly Setting[] = [
  { path: "host", variable: "FENCED_GATEWAY_HOST", flag: "--host <host>", read: "text" },
  { path: "port", variable: "FENCED_GATEWAY_PORT", flag: "-p, --port <port>", read: "number" },
  { path: "apiKeys", variable: "FENCED_GATEWAY_API_KEYS", read: "json" },
  { path: "fenceKeys", variable: "FENCED_GATEWAY_FENCE_KEYS", read: "json" },
  { path: "redis.urls", variable: "FENCED_GATEWAY_REDIS_URLS", flag: "--redis <urls>", read: "list" },
  { path: "redis.nodeTimeoutMs", variable: "FENCED_GATEWAY_REDIS_NODE_TIMEOUT_MS", flag: "--redis-node-timeout-ms <ms>", read: "number" },
  { path: "redis.acquireTimeoutMs", variable: "FENCED_GATEWAY_ACQUIRE_TIMEOUT_MS", flag: "--acquire-timeout-ms <ms>", read: "number" },
  ...storeSettings(),
  { path: "storeTimeoutMs", variable: "FENCED_GATEWAY_STORE_TIMEOUT_MS", flag: "--store-timeout-ms <ms>", read: "number" },
  { path: "limits.recordBytes", variable: "FENCED_GATEWAY_MAX_RECORD_BYTES", flag: "--max-record-bytes <n>", read: "number" },
  { path: "limits.objectBytes", variable: "FENCED_GATEWAY_MAX_OBJECT_BYTES", flag: "--max-object-bytes <n>", read: "number" },
  { path: "limits.maxTtlMs", variable: "FENCED_GATEWAY_MAX_TTL_MS", flag: "--max-ttl-ms <ms>", read: "number" },
  { path: "admin.host", variable: "FENCED_GATEWAY_ADMIN_HOST", flag: "--admin-host <host>", read: "text" },
  { path: "admin.port", variable: "FENCED_GATEWAY_ADMIN_PORT", flag: "--admin-port <port>", read: "number" },
  { path: "keepAliveTimeoutMs", variable: "FENCED_GATEWAY_KEEP_ALIVE_TIMEOUT_MS", flag: "--keep-alive-timeout-ms <ms>", read: "number" },
  { path: "headersTimeoutMs", variable: "FENCED_GATEWAY_HEADERS_TIMEOUT_MS", flag: "--headers-timeout-ms <ms>", read: "number" },
  { path: "requestTimeoutMs", variable: "FENCED_GATEWAY_REQUEST_TIMEOUT_MS", flag: "--request-timeout-ms <ms>", read: "number" },
  { path: "maxConnections", variable: "FENCED_GATEWAY_MAX_CONNECTIONS", flag: "--max-connections <n>", read: "number" },
  { path: "listenBacklog", variable: "FENCED_GATEWAY_LISTEN_BACKLOG", flag: "--listen-backlog <n>", read: "number" },
  { path: "acceptors", variable: "FENCED_GATEWAY_ACCEPTORS", flag: "--acceptors <n>", read: "number" },
  { path: "drainTimeoutMs", variable: "FENCED_GATEWAY_DRAIN_TIMEOUT_MS", flag: "--drain-timeout-ms <ms>", read: "number" },
  { path: "admission.enabled", variable: "FENCED_GATEWAY_ADMISSION", flag: "--no-admission", read: "boolean" },
  { path: "admission.minConcurrency", variable: "FENCED_GATEWAY_MIN_CONCURRENCY", flag: "--min-concurrency <n>", read: "number" },
  { path: "admission.maxConcurrency", variable: "FENCED_GATEWAY_MAX_CONCURRENCY", flag: "--max-concurrency <n>", read: "number" },
  { path: "admission.queueLength", variable: "FENCED_GATEWAY_ADMISSION_QUEUE", flag: "--admission-queue <n>", read: "number" },
  {
    path: "admission.queueTimeoutMs",
    variable: "FENCED_GATEWAY_ADMISSION_QUEUE_TIMEOUT_MS",
    flag: "--admission-queue-timeout-ms <ms>",
    read: "number",
  },
  {
    path: "admission.maxEventLoopDelayMs",
    variable: "FENCED_GATEWAY_MAX_EVENT_LOOP_DELAY_MS",
    flag: "--max-event-loop-delay-ms <ms>",
    read: "number",
  },
  { path: "logLevel", variable: "FENCED_GATEWAY_LOG_LEVEL", flag: "--log-level <level>", read: "text" },
  { path: "migrate", flag: "--no-migrate", read: "boolean" },
  { path: "migrateInBackground", variable: "FENCED_GATEWAY_MIGRATE_IN_BACKGROUND", read: "boolean" },
  { path: "verify", flag: "--no-verify", read: "boolean" },
  { path: "startChecks", variable: "FENCED_GATEWAY_START_CHECKS", flag: "--no-start-checks", read: "boolean" },
];

/** Each registered store's settings, in registry order, as `<store name>.<field>`. */
function storeSettings(): Setting[] {
  return STORES.flatMap(({ name, config }) =>
    config.settings.map(({ field, variable, flag, read }) => ({
      path: `${name}.${field}`,
      variable,
      ...(flag === undefined ? {} : { flag }),
      read,
    })),
  );
}

/**
 * The field that enables a store's section, for an operator: what it names, and where else it can
 * be given (its variable, and its flag as a user types it).
 */
export function enabledBy(store: StoreRegistration): { field: string; what: string; variable: string; flag: string } {
  const { field, what } = store.config.enabledBy;
  const setting = store.config.settings.find((s) => s.field === field);
  // A registration whose enabling field has no flag is a mistake in it, which every start and test would meet here.
  if (setting?.flag === undefined) throw new Error(`the ${store.name} registration's enabledBy.field ${field} has no setting with a flag`);
  return { field, what, variable: setting.variable, flag: flagNames(setting.flag).long };
}

/** The variable that names the config file (also `--config`). */
export const CONFIG_VARIABLE = "FENCED_GATEWAY_CONFIG";

/** Flags as commander hands them over, by attribute name (`--postgres-schema` → postgresSchema); every one optional. */
export type ConfigFlags = Readonly<Record<string, string | boolean | undefined>>;

export type Raw = Record<string, unknown>;

/** commander's name for a flag's value (`--no-migrate` → migrate) and the flag as a user types it (`--no-migrate`). */
export function flagNames(flag: string): { attribute: string; long: string } {
  const option = new Option(flag);
  return { attribute: option.attributeName(), long: option.long ?? flag };
}

/** A number where one was given; a non-number stays a string so that the schema reports it by name. */
function num(value: string): number | string {
  const n = Number(value);
  return Number.isFinite(n) ? n : value;
}

/** "false"/"0"/"no" and "true"/"1"/"yes"; anything else stays a string, which the schema reports by name. */
function bool(value: string): boolean | string {
  const v = value.trim().toLowerCase();
  return ["true", "1", "yes"].includes(v) ? true : ["false", "0", "no"].includes(v) ? false : value;
}

/** A variable's or flag's text as its field's value; an empty text is no value (an unset variable). */
function read(setting: Setting, text: string, source: string): unknown {
  if (text.trim() === "") return undefined;
  switch (setting.read) {
    case "text":
      return text;
    case "number":
      return num(text);
    case "boolean":
      return bool(text);
    case "list":
      return text
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s !== "");
    case "json":
      try {
        return JSON.parse(text) as unknown;
      } catch {
        throw new Error(`${source} must be JSON (a JSON array, as ${setting.path} in the config file)`);
      }
  }
}

function set(raw: Raw, path: string, value: unknown): void {
  const parts = path.split(".");
  let node = raw;
  for (const part of parts.slice(0, -1)) node = (node[part] ??= {}) as Raw;
  node[parts[parts.length - 1] as string] = value;
}

/** The settings given in the environment, as a partial configuration. */
export function fromEnv(env: NodeJS.ProcessEnv): Raw {
  const raw: Raw = {};
  for (const setting of SETTINGS) {
    const text = setting.variable === undefined ? undefined : env[setting.variable];
    const value = text === undefined ? undefined : read(setting, text, setting.variable as string);
    if (value !== undefined) set(raw, setting.path, value);
  }
  return raw;
}

/** The settings given as flags, as a partial configuration. A negated flag (`--no-migrate`) counts only when given. */
export function fromFlags(flags: ConfigFlags): Raw {
  const raw: Raw = {};
  for (const setting of SETTINGS) {
    if (setting.flag === undefined) continue;
    const { attribute, long } = flagNames(setting.flag);
    const given = flags[attribute];
    // commander sets a negatable flag's value to true when it is absent: only false was given.
    const value = typeof given === "boolean" ? (given ? undefined : false) : given === undefined ? undefined : read(setting, given, long);
    if (value !== undefined) set(raw, setting.path, value);
  }
  return raw;
}

/** Where each setting of a section was given, by variable or flag name (for an error that says what needs what). */
export function givenFor(section: string, env: NodeJS.ProcessEnv, flags: ConfigFlags): string[] {
  const of = SETTINGS.filter((s) => s.path.startsWith(`${section}.`));
  const variables = of.flatMap((s) => (s.variable !== undefined && (env[s.variable] ?? "") !== "" ? [s.variable] : []));
  const flagged = of.flatMap((s) => {
    if (s.flag === undefined) return [];
    const { attribute, long } = flagNames(s.flag);
    return flags[attribute] !== undefined && typeof flags[attribute] !== "boolean" ? [long] : [];
  });
  return [...variables, ...flagged];
}
