import type { Pool } from "pg";
import { z } from "zod";
import { sqlState } from "@fenced/store/internal";
import type { FencedPostgres } from "@fenced/store/postgres";
import { said } from "./check.js";
import type { StoreDefinition } from "./registration.js";

/** createGateway's `records`: FencedPostgres on this pool (pg's Pool, or any pool of its shape). */
export interface PostgresRecordsOptions {
  readonly pool: Pool;
  readonly schema?: string | undefined;
}

export const postgresSection = z.strictObject({
  // Checked like the lock's URLs: pg reads any other text as a database name on a host called "base".
  url: z
    .string()
    .regex(/^postgres(ql)?:\/\//, "must be a postgres:// or postgresql:// URL, such as postgres://user:password@host:5432/database")
    .describe("PostgreSQL connection string, a postgres:// or postgresql:// URL (enables /v1/records)"),
  schema: z.string().optional().describe("schema of the fence and records tables (default fenced)"),
  poolSize: z.number().int().min(1).max(1_000).default(16).describe("connections to PostgreSQL at most (default 16)"),
});

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

/** The records family on PostgreSQL (FencedPostgres). */
export const postgresRecords: StoreDefinition<"records", "postgres", typeof postgresSection, PostgresRecordsOptions, FencedPostgres> = {
  family: "records",
  name: "postgres",
  title: "PostgreSQL",
  fenceDescription: "PostgreSQL's fence row (present when the gateway serves records)",
  config: {
    section: postgresSection,
    settings: [
      { field: "url", variable: "FENCED_GATEWAY_POSTGRES_URL", flag: "--postgres <url>", read: "text" },
      { field: "schema", variable: "FENCED_GATEWAY_POSTGRES_SCHEMA", flag: "--postgres-schema <name>", read: "text" },
      { field: "poolSize", variable: "FENCED_GATEWAY_POSTGRES_POOL_SIZE", flag: "--postgres-pool-size <n>", read: "number" },
    ],
    enabledBy: { field: "url", what: "connection string" },
    sweepFields: ["url"],
  },

  accepts: (options): options is PostgresRecordsOptions => "pool" in options,

  load: () => import("./postgres-driver.js").then((driver) => driver.postgresDriver),

  pool: ({ pool }) => pool,

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

  // Its sweep answers this without loading the driver.
  nothingToSweep:
    "nothing to sweep: a record and its resource's fence row change only inside one transaction, so no write, " +
    "failed or abandoned, leaves anything behind; tombstones and fence rows stay by design (they keep each key's owner " +
    "and each resource's highest token)",
};
