// PostgreSQL's driver, on pg (its registration: postgres.ts).
import { StoreSetupError, StoreUnavailableError } from "@fenced/store";
import { sqlState } from "@fenced/store/internal";
import { FencedPostgres } from "@fenced/store/postgres";
import { message, systemCode, within, type CheckState, type SetupProblem } from "./check.js";
import type { StoreDriver } from "./registration.js";
import type { PostgresRecordsOptions, postgresSection } from "./postgres.js";

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

export const postgresDriver: StoreDriver<typeof postgresSection, PostgresRecordsOptions, FencedPostgres> = {
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
};
