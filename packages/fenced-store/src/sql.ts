/**
 * Every SQL text FencedPostgres sends. The only thing ever interpolated is the schema identifier,
 * validated by quoteSchema; every other input travels as a bind parameter.
 */

/** Unquoted-identifier shape; also keeps the name within PostgreSQL's 63-byte NAMEDATALEN limit. */
export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/** Validates a schema name and returns it double-quoted, ready for interpolation. */
export function quoteSchema(schema: unknown): string {
  if (typeof schema !== "string") throw new TypeError("schema must be a string");
  if (!SCHEMA_NAME.test(schema)) throw new RangeError(`schema must match ${String(SCHEMA_NAME)}, got ${JSON.stringify(schema)}`);
  // CREATE SCHEMA refuses pg_* names; say so before any I/O.
  if (schema.startsWith("pg_")) throw new RangeError("schema must not start with 'pg_' (reserved by PostgreSQL)");
  return `"${schema}"`;
}

export interface Statements {
  /** $1 = lock name. Serialises concurrent migrate() calls: concurrent CREATE … IF NOT EXISTS can still collide in the catalogs. */
  readonly migrateLock: string;
  /** $1 = lock name. */
  readonly migrateUnlock: string;
  /** Plain DDL, no parameters; idempotent. */
  readonly migrate: readonly string[];
  /** $1 resource, $2 token → one row { token } when accepted, zero rows when fenced. */
  readonly ratchet: string;
  /** $1 resource → { token } | no row. */
  readonly highest: string;
  /** $1 resource, $2 token, $3 key, $4 value (JSON text) → one row { version } when accepted, zero rows when fenced. */
  readonly putUnconditional: string;
  /**
   * $1 resource, $2 token, $3 key, $4 value, $5 expected version → one row { token, version }:
   * token null = fenced, version null = version mismatch. Run inside BEGIN…COMMIT, so that a
   * mismatch can be rolled back together with the ratchet it raised.
   */
  readonly putIfVersion: string;
  /** $1 resource, $2 token, $3 key, $4 expected version → one row { token, version } as putIfVersion. */
  readonly deleteIfVersion: string;
  /** $1 key → { version } | no row. Run after `ratchet`, in its transaction. */
  readonly deleteAny: string;
  /** $1 key → { version } | no row. */
  readonly currentVersion: string;
  /** $1 key → { value, version, token, resource } | no row. */
  readonly get: string;
}

export function statements(schema: string): Statements {
  const fence = `${schema}.fence`;
  const records = `${schema}.records`;
  const versions = `${schema}.record_version`;

  // The ratchet. ON CONFLICT DO UPDATE locks the conflicting row and evaluates its WHERE on the
  // newest committed version of that row, even one our snapshot cannot see (READ COMMITTED), so two
  // writers of one resource are ordered by the row lock and a lower token can never overwrite a higher
  // one. An equal token passes: it is the same holder writing again.
  const ratchet = `INSERT INTO ${fence} AS f (resource, token) VALUES ($1, $2::bigint)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token
RETURNING f.token`;

  return {
    // A session-level lock, taken before the migration's transaction begins: a transaction that
    // starts after the previous holder committed refreshes its catalog caches at BEGIN, so its
    // IF NOT EXISTS checks see the objects that holder created (a lock taken inside an already
    // open transaction could leave a stale "does not exist" cached, and CREATE would then collide).
    migrateLock: "SELECT pg_advisory_lock(hashtextextended($1, 0))",
    migrateUnlock: "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
    migrate: [
      `CREATE SCHEMA IF NOT EXISTS ${schema}`,
      `CREATE TABLE IF NOT EXISTS ${fence} (
  resource text PRIMARY KEY,
  token bigint NOT NULL CHECK (token >= 0)
)`,
      // Versions come from one sequence and are never reused, so a record deleted and written again
      // can never present a version an old reader still holds (no ABA through ifVersion).
      `CREATE SEQUENCE IF NOT EXISTS ${versions} AS bigint`,
      `CREATE TABLE IF NOT EXISTS ${records} (
  key text PRIMARY KEY,
  value jsonb NOT NULL,
  version bigint NOT NULL DEFAULT nextval('${versions}'),
  token bigint NOT NULL CHECK (token >= 0),
  resource text NOT NULL
)`,
    ],
    ratchet,
    highest: `SELECT token FROM ${fence} WHERE resource = $1`,
    // One statement, one round trip, one implicit transaction. The record insert reads its row FROM
    // the ratchet CTE, so it runs only after the ratchet has locked and raised the fence row, and
    // inserts nothing when the ratchet returned nothing. The upsert writes every column from its own
    // parameters and never reads the old row, so the statement's (possibly older) snapshot cannot
    // make it lose a write: ON CONFLICT finds the newest committed row regardless of the snapshot.
    putUnconditional: `WITH ratchet AS (${ratchet})
INSERT INTO ${records} AS r (key, value, token, resource)
SELECT $3, $4::jsonb, ratchet.token, $1 FROM ratchet
ON CONFLICT (key) DO UPDATE
SET value = EXCLUDED.value, version = EXCLUDED.version, token = EXCLUDED.token, resource = EXCLUDED.resource
RETURNING r.version`,
    // A conditional write needs no fresh snapshot: the UPDATE finds the row as of the statement's
    // snapshot, but before changing it locks it and, if a concurrent transaction changed or deleted it
    // meanwhile, re-evaluates "version = $5" on the newest version (READ COMMITTED), so it succeeds
    // only if the record is still at the version the caller read. EXISTS (… ratchet) is an
    // uncorrelated sub-select, run once before the first row is locked: the fence row is locked first.
    putIfVersion: `WITH ratchet AS (${ratchet}),
written AS (
  UPDATE ${records}
  SET value = $4::jsonb, version = nextval('${versions}'), token = $2::bigint, resource = $1
  WHERE key = $3 AND version = $5::bigint AND EXISTS (SELECT 1 FROM ratchet)
  RETURNING version
)
SELECT (SELECT token FROM ratchet) AS token, (SELECT version FROM written) AS version`,
    deleteIfVersion: `WITH ratchet AS (${ratchet}),
deleted AS (
  DELETE FROM ${records} WHERE key = $3 AND version = $4::bigint AND EXISTS (SELECT 1 FROM ratchet)
  RETURNING version
)
SELECT (SELECT token FROM ratchet) AS token, (SELECT version FROM deleted) AS version`,
    // An unconditional delete must also remove a row committed while we waited for the fence lock,
    // which the waiting statement's snapshot cannot see; so it runs as its own statement after the
    // ratchet, and its fresh snapshot sees every write this resource committed before us.
    deleteAny: `DELETE FROM ${records} WHERE key = $1 RETURNING version`,
    currentVersion: `SELECT version FROM ${records} WHERE key = $1`,
    get: `SELECT value, version, token, resource FROM ${records} WHERE key = $1`,
  };
}

/** Transaction control for the multi-statement operations (conditional writes, deletes, transaction()). */
export const BEGIN = "BEGIN";
export const COMMIT = "COMMIT";
export const ROLLBACK = "ROLLBACK";
