import type { Pool } from "pg";
import { z } from "zod";
import { StoreSetupError, StoreUnavailableError } from "@fenced/store";
import { sqlState } from "@fenced/store/internal";
import { FencedPostgres } from "@fenced/store/postgres";
import { message, said, systemCode, within, type CheckState, type SetupProblem } from "./check.js";
import type { StoreDefinition } from "./registration.js";

/** createGateway's `records`: FencedPostgres on this pool (pg's Pool, or any pool of its shape). */
export interface PostgresRecordsOptions {
  readonly pool: Pool;
  readonly schema?: string | undefined;
}

const section = z.strictObject({
  // Checked like the lock's URLs: pg reads any other text as a database name on a host called "base".
  url: z
    .string()
    .regex(/^postgres(ql)?:\/\//, "must be a postgres:// or postgresql:// URL, such as postgres://user:password@host:5432/database")
    .describe("PostgreSQL connection string, a postgres:// or postgresql:// URL (enables /v1/records)"),
  schema: z.string().optional().describe("schema of the fence and records tables (default fenced)"),
  poolSize: z.number().int().min(1).max(1_000).default(16).describe("connections to PostgreSQL at most (default 16)"),
});

/** The key the readiness check reads: any key will do, the read proves the tables are there. */
const PROBE_KEY = "fenced-gateway/start-check";

/** What a PostgreSQL SQLSTATE the store passes on means for its setup (the server answered, and refused). */
const SETUP: Readonly<Record<string, SetupProblem>> = {
  "3D000": "no-such-database", // invalid_catalog_name
  "28P01": "authentication-failed", // invalid_password
  "28000": "authentication-failed", // invalid_authorization_specification (pg_hba.conf)
  "42501": "permission-denied", // insufficient_privilege
};

const UNAVAILABLE: Readonly<Record<string, CheckState>> = {
  refused: "refused",
  timeout: "timeout",
  connection: "error",
  throttled: "error",
};

/** What an operator can do when PostgreSQL refuses the start's statement, by SQLSTATE. */
const FIX: Readonly<Record<string, string>> = {
  // insufficient_privilege
  "42501":
    "grant the gateway's role CREATE on the database and on the schema, or migrate once with a role that may and start with --no-migrate",
  // invalid_catalog_name
  "3D000": "create the database, or name an existing one in the connection string",
  // invalid_authorization_specification, invalid_password
  "28000": "check the role and the server's pg_hba.conf",
  "28P01": "check the role's password",
};

/** Why PostgreSQL has nothing to sweep: what the report and stderr say. */
const NOTHING_TO_SWEEP =
  "nothing to sweep: a record and its resource's fence row change only inside one transaction, so no write, " +
  "failed or abandoned, leaves anything behind; tombstones and fence rows stay by design (they keep each key's owner " +
  "and each resource's highest token)";

/** The records family on PostgreSQL (FencedPostgres). */
export const postgresRecords: StoreDefinition<"records", "postgres", typeof section, PostgresRecordsOptions, FencedPostgres> = {
  family: "records",
  name: "postgres",
  title: "PostgreSQL",
  fenceDescription: "PostgreSQL's fence row (present when the gateway serves records)",
  config: {
    section,
    enabledBy: { field: "url", what: "connection string", variable: "FENCED_GATEWAY_POSTGRES_URL", flag: "--postgres" },
    sweepFields: ["url"],
  },

  accepts: (options): options is PostgresRecordsOptions => "pool" in options,

  async fromSection({ url, poolSize, schema }, { storeTimeoutMs, logger, closers }) {
    // Loaded only when records are served from the configuration: createGateway takes the caller's own pool.
    const { default: pg } = await import("pg");
    const pool = new pg.Pool({ connectionString: url, max: poolSize, connectionTimeoutMillis: storeTimeoutMs });
    // An idle connection the server drops emits 'error' on the pool; unhandled, it would end the process.
    pool.on("error", (err) => logger.warn({ err }, "postgres connection lost"));
    // And every connection keeps a listener of its own for its whole life: pg emits 'error' on a
    // client whose server ends its session (57P01 when PostgreSQL stops), and an error emitted at a
    // moment neither the pool nor a store call listens must not end the process either.
    pool.on("connect", (client) => client.on("error", (err) => logger.debug({ err }, "postgres connection error")));
    closers.push(() => pool.end());
    return { pool, ...(schema === undefined ? {} : { schema }) };
  },

  create: ({ pool, schema }, timeoutMs) => new FencedPostgres(pool, { timeoutMs, ...(schema === undefined ? {} : { schema }) }),

  pool: ({ pool }) => pool,

  /**
   * A read of the store's records table, as every request does it (FencedPostgres.get): proves the
   * server answers, the role logs in, and migrate() has run. Read-only.
   */
  check: (store, _options, timeoutMs) =>
    within(
      timeoutMs,
      (signal) => store.get(PROBE_KEY, { signal }),
      (err) => {
        const detail = message(err);
        if (err instanceof StoreSetupError) return { state: "misconfigured", problem: "not-migrated", detail };
        if (err instanceof StoreUnavailableError) {
          // The driver's error below it says why, by its system code (ECONNREFUSED, ENOTFOUND …).
          const cause = systemCode(err.cause);
          return {
            state: UNAVAILABLE[err.reason] ?? "error",
            ...(cause === undefined ? {} : { code: cause }),
            detail: `${detail}${err.cause instanceof Error ? ` (${err.cause.message})` : ""}`,
          };
        }
        const state = sqlState(err);
        const problem = state === undefined ? undefined : SETUP[state];
        if (problem !== undefined) return { state: "misconfigured", problem, code: state, detail };
        return { state: "error", ...(state === undefined ? {} : { code: state }), detail };
      },
    ),

  async prepare(store, { migrate }, call) {
    // Not migrating: verify() proves the tables are there and the version sequence ahead of every
    // record (the store throws StoreSetupError "not-migrated" otherwise, naming the fix); migrate() repairs both.
    if (migrate ?? true) await call("migrate", () => store.migrate());
    else await call("verify", () => store.verify());
  },

  backendCode: sqlState,

  startRefusal(check, timeoutMs) {
    switch (check.problem) {
      case "not-migrated":
        return undefined; // the start's migrate creates them (with --no-migrate, its read refuses)
      case "no-such-database":
        return `PostgreSQL answered that the database does not exist${said(check)}: create it (createdb), or name an existing one in the connection string`;
      case "authentication-failed":
        return `PostgreSQL refused the login${said(check)}: check the user and password in the connection string, and the server's pg_hba.conf`;
      case "permission-denied":
        return `PostgreSQL refused the role access to the store's tables${said(check)}: grant it, or use the role that migrated them`;
      default:
    }
    switch (check.state) {
      case "refused":
        return `PostgreSQL refused the connection${said(check)}: is the server running, and are the connection string's host and port its own?`;
      case "timeout":
        return `PostgreSQL did not answer within ${timeoutMs} ms: check that its host is reachable from here (a firewall that drops packets?)`;
      default:
        return `PostgreSQL could not be asked${said(check)}: check the connection string`;
    }
  },

  backendFix: (code, operation) =>
    FIX[code] ??
    (operation === "migrate"
      ? "check the role's privileges on the database and the schema, or start with --no-migrate"
      : "check the connection string and the role's privileges"),

  sweeps: false,

  sweep(_section, { line }) {
    line(`PostgreSQL: ${NOTHING_TO_SWEEP}`);
    return Promise.resolve({ swept: false, why: NOTHING_TO_SWEEP });
  },
};
