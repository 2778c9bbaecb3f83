/**
 * The schema's layout (PROTOCOL.md, "Layout"): the tables, the version sequence and the refusal
 * functions the write statements call, as migrate() creates and upgrades them (migrate.ts runs
 * these), and the SQLSTATEs those functions raise. The write statements themselves are sql.ts's (their
 * record upserts, upsert-sql.ts's).
 */

/** The schema's objects, by their quoted names (schema: a quoted identifier, as quoteSchema returns it). */
export function objectNames(schema: string) {
  return {
    schema,
    fence: `${schema}.fence`,
    records: `${schema}.records`,
    versions: `${schema}.record_version`,
    refuse: `${schema}.refuse_foreign_write`,
    refuseConditional: `${schema}.refuse_conditional_write`,
    refuseStale: `${schema}.refuse_stale_fence`,
    keepCopy: `${schema}.keep_fence_copy`,
    clearCopy: `${schema}.clear_fence_copy`,
  } as const;
}

export type ObjectNames = ReturnType<typeof objectNames>;

/**
 * SQLSTATE of the error a put (with or without ifVersion) or a conditional delete raises when the key
 * belongs to another resource. The error aborts the write's single statement, and with it the
 * ratchet raise that statement made. Its DETAIL field carries the owner. A class of our own ("FN"):
 * no PostgreSQL error uses it.
 */
export const FOREIGN_KEY_REFUSED = "FN001";

/**
 * SQLSTATE of the error a conditional write (ifVersion) raises when the record is not live at the
 * expected version (another version, a tombstone, or no row). The error aborts the write's single
 * statement, and with it the ratchet raise that statement made. Its DETAIL field carries the
 * record's current version, or '' when there is no live record.
 */
export const VERSION_REFUSED = "FN002";

/**
 * SQLSTATE of the error putAllOrdered raises when one of its fences is stale: the statement fails
 * as a whole, so the other fences' raises are undone with it (putAll() is all or nothing).
 */
export const FENCE_REFUSED = "FN003";

/** SQLSTATE that rolls back keep_fence_copy's probe (its own subtransaction, caught where raised): never seen outside it. */
const COPY_PROBE = "FN004";

export interface SchemaStatements {
  /** $1 = lock name. Serialises concurrent migrate() calls: concurrent CREATE … IF NOT EXISTS can still collide in the catalogs. */
  readonly migrateLock: string;
  /** $1 = lock name. */
  readonly migrateUnlock: string;
  /** Plain DDL, no parameters; idempotent. Creates the current layout where nothing exists. */
  readonly migrate: readonly string[];
  /** $1 schema name → { table, column, notNull } for the columns of `fence` and `records`: what an upgrade must add. */
  readonly layout: string;
  /** Upgrades of a layout created by an earlier version, each run only when `layout` shows it is missing. */
  readonly addFenceHolder: string;
  readonly addRecordHolder: string;
  readonly allowTombstones: string;
  /** Adds the fence copy's columns to a `records` of an earlier layout: null, a copy missing, which never admits. */
  readonly addFenceCopy: string;
  /**
   * $1 schema name → { table, name, enabled } for the triggers of `fence` and `records`: the copy's
   * two (COPY_TRIGGERS) must exist and fire always (tgenabled 'A'), whatever session_replication_role.
   */
  readonly triggers: string;
  /** Creates a copy trigger that is missing (COPY_TRIGGERS), run by migrate() only then; then alwaysFires. */
  readonly createCopyTrigger: Record<CopyTrigger, string>;
  /** Makes a copy trigger fire whatever session_replication_role, run by migrate() when it does not. */
  readonly alwaysFires: Record<CopyTrigger, string>;
  /**
   * Taken by migrate() before any change to the copy (its columns, its triggers): no raise runs until
   * its COMMIT, and `fence` is locked before `records`, as every writer locks them (an upgrade that
   * locked `records` first would deadlock with a writer between its ratchet and its record).
   */
  readonly lockFence: string;
  /**
   * Forgets every copy: run by migrate() after it restored a copy trigger, under lockFence. A trigger
   * that was missing or disabled may have let a raise leave a copy behind its fence row; a null copy
   * never admits, and the next write at the fence row's fence sets it again.
   */
  readonly clearCopies: string;
  /**
   * $1 schema name → { increment, cache, cycle } of the version sequence: putOrdered's check needs it
   * to hand out increasing values in real time (write-order.ts), which a per-session cache, a
   * negative step or a wrap-around would break.
   */
  readonly versionSequence: string;
  /** Restores what versionSequence checks; run by migrate() only when it differs. */
  readonly orderVersions: string;
  /**
   * $1 schema name → { draws }: whether records.version's default draws from the schema's version
   * sequence. DROP SEQUENCE … CASCADE drops the default with the sequence; CREATE SEQUENCE IF NOT
   * EXISTS brings the sequence back, not the default.
   */
  readonly versionDefault: string;
  /** Restores what versionDefault checks; run by migrate() only when it is missing. */
  readonly restoreVersionDefault: string;
  /**
   * → { next, newest }: the value the version sequence hands out next, and the newest version of any
   * record (null: none). Safe only when next > newest (PROTOCOL.md, "What the database must
   * provide"). Scans `records` (version has no index): migrate() and verify() only, never per request.
   */
  readonly versionPosition: string;
  /**
   * Taken by migrate() before it moves the sequence, held until its COMMIT: every writer of `records`
   * takes ROW EXCLUSIVE, so none draws a version between the read of versionPosition and setval —
   * which would otherwise move the sequence back under a version just drawn.
   */
  readonly lockRecords: string;
  /** $1 version → the sequence set so that it hands out $1 + 1 next. */
  readonly advanceVersions: string;
}

export function schemaStatements(names: ObjectNames): SchemaStatements {
  const { fence, records, versions } = names;
  return {
    // A session-level lock, taken before the migration's transaction begins: a transaction that
    // starts after the previous holder committed refreshes its catalog caches at BEGIN, so its
    // IF NOT EXISTS checks see the objects that holder created (a lock taken inside an already
    // open transaction could leave a stale "does not exist" cached, and CREATE would then collide).
    migrateLock: "SELECT pg_advisory_lock(hashtextextended($1, 0))",
    migrateUnlock: "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
    migrate: [...layoutObjects(names), ...refusalFunctions(names), ...copyFunctions(names)],
    layout: `SELECT c.relname AS "table", a.attname AS "column", a.attnotnull AS "notNull"
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname IN ('fence', 'records') AND a.attnum > 0 AND NOT a.attisdropped`,
    // Rows of an earlier layout get holder null: their tokens were presented by an unknown holder,
    // so an equal token with a holder is refused (a higher token is not).
    addFenceHolder: `ALTER TABLE ${fence} ADD COLUMN IF NOT EXISTS holder text`,
    addRecordHolder: `ALTER TABLE ${records} ADD COLUMN IF NOT EXISTS holder text`,
    allowTombstones: `ALTER TABLE ${records} ALTER COLUMN value DROP NOT NULL`,
    addFenceCopy: `ALTER TABLE ${records} ADD COLUMN IF NOT EXISTS fence_token bigint, ADD COLUMN IF NOT EXISTS fence_holder text`,
    triggers: `SELECT c.relname AS "table", t.tgname AS "name", t.tgenabled::text AS "enabled"
FROM pg_catalog.pg_trigger t
JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname IN ('fence', 'records') AND NOT t.tgisinternal`,
    ...copyTriggers(names),
    lockFence: `LOCK TABLE ${fence} IN SHARE ROW EXCLUSIVE MODE`,
    clearCopies: `UPDATE ${records} SET fence_token = NULL, fence_holder = NULL WHERE fence_token IS NOT NULL OR fence_holder IS NOT NULL`,
    versionSequence: `SELECT increment_by::text AS increment, cache_size::text AS cache, cycle FROM pg_catalog.pg_sequences
WHERE schemaname = $1 AND sequencename = 'record_version'`,
    orderVersions: `ALTER SEQUENCE ${versions} INCREMENT BY 1 CACHE 1 NO CYCLE`,
    // The default depends on the sequence (pg_depend), whatever text it prints as.
    versionDefault: `SELECT EXISTS (
  SELECT 1 FROM pg_catalog.pg_attrdef d
  JOIN pg_catalog.pg_class c ON c.oid = d.adrelid AND c.relname = 'records'
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace AND n.nspname = $1
  JOIN pg_catalog.pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum AND a.attname = 'version'
  JOIN pg_catalog.pg_depend dep ON dep.classid = 'pg_catalog.pg_attrdef'::regclass AND dep.objid = d.oid
    AND dep.refclassid = 'pg_catalog.pg_class'::regclass
  JOIN pg_catalog.pg_class s ON s.oid = dep.refobjid AND s.relnamespace = n.oid AND s.relname = 'record_version'
) AS draws`,
    restoreVersionDefault: `ALTER TABLE ${records} ALTER COLUMN version SET DEFAULT nextval('${versions}')`,
    versionPosition: `SELECT (CASE WHEN s.is_called THEN s.last_value::numeric + 1 ELSE s.last_value END)::text AS next,
  (SELECT max(version) FROM ${records})::text AS newest
FROM ${versions} s`,
    lockRecords: `LOCK TABLE ${records} IN SHARE MODE`,
    advanceVersions: `SELECT setval('${versions}', $1::bigint, true)`,
  };
}

/** The schema, its tables and the version sequence, each created only where it does not exist yet. */
function layoutObjects(names: ObjectNames): string[] {
  const { schema, fence, records, versions } = names;
  return [
    `CREATE SCHEMA IF NOT EXISTS ${schema}`,
    // holder: the holder that presented `token` (null: a fence without a holder).
    `CREATE TABLE IF NOT EXISTS ${fence} (
  resource text PRIMARY KEY,
  token bigint NOT NULL CHECK (token >= 0),
  holder text
)`,
    // Versions come from one sequence and are never reused, so a record deleted and written again
    // can never present a version an old reader still holds (no ABA through ifVersion).
    `CREATE SEQUENCE IF NOT EXISTS ${versions} AS bigint`,
    // resource: the owner, the resource that created the key (or received it by transfer); it
    // never changes otherwise, so every write of the key passes one ratchet. value null: a
    // tombstone, which keeps the owner and the version sequence after a delete. token, holder: the
    // fence that wrote this version. fence_token, fence_holder: the copy (COPY_TRIGGERS) — on a
    // record whose key is its owner's name, the fence row of that resource; null elsewhere, or missing.
    `CREATE TABLE IF NOT EXISTS ${records} (
  key text PRIMARY KEY,
  value jsonb,
  version bigint NOT NULL DEFAULT nextval('${versions}'),
  token bigint NOT NULL CHECK (token >= 0),
  resource text NOT NULL,
  holder text,
  fence_token bigint,
  fence_holder text
)`,
  ];
}

/** The refusal functions the write statements call, (re)defined by every migrate(). */
function refusalFunctions(names: ObjectNames): string[] {
  const { records, refuse, refuseConditional, refuseStale } = names;
  return [
    // Raised from inside the unconditional put (and through refuse_conditional_write), so that its one
    // statement fails as a whole. VOLATILE: the SELECT takes a fresh snapshot, and sees the owner the
    // put was refused for, whose row the put holds locked (ON CONFLICT DO UPDATE locks the row
    // before it evaluates its WHERE, which calls this).
    `CREATE OR REPLACE FUNCTION ${refuse}(k text, r text) RETURNS text LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  owner text;
BEGIN
  SELECT resource INTO owner FROM ${records} WHERE key = k;
  RAISE EXCEPTION USING ERRCODE = '${FOREIGN_KEY_REFUSED}', MESSAGE = format('key %L belongs to resource %L, not %L', k, owner, r), DETAIL = coalesce(owner, '');
END
$fn$`,
    // Raised from inside a conditional write that the ratchet admitted but the record refused, so
    // that its one statement fails as a whole: the owner first (through refuse_foreign_write), then
    // the version. Called with the record's row locked by the write (or, for a key that did not
    // exist, with the write's own uncommitted placeholder of version 0 being all there is), so the
    // fresh snapshot (VOLATILE) shows what the write was refused for. Declared bigint: the write's
    // RETURNING calls it in place of the version it would have returned.
    `CREATE OR REPLACE FUNCTION ${refuseConditional}(k text, r text) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  found_row record;
BEGIN
  SELECT resource, version, value IS NULL AS deleted INTO found_row FROM ${records} WHERE key = k;
  IF found_row.resource IS NOT NULL AND found_row.resource <> r THEN
    PERFORM ${refuse}(k, r);
  END IF;
  RAISE EXCEPTION USING ERRCODE = '${VERSION_REFUSED}', MESSAGE = format('key %L is not live at the expected version', k),
    DETAIL = CASE WHEN found_row.deleted = false AND found_row.version <> 0 THEN found_row.version::text ELSE '' END;
END
$fn$`,
    // Raised from inside putAllOrdered when one of its fences is stale, so that its one statement fails
    // as a whole and the other fences' raises are undone with it. Declared boolean: the statement's
    // one-time filter calls it in place of the true it would have given.
    `CREATE OR REPLACE FUNCTION ${refuseStale}() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
  RAISE EXCEPTION USING ERRCODE = '${FENCE_REFUSED}', MESSAGE = 'a fence of the write is stale';
END
$fn$`,
  ];
}

/**
 * The fence copy (PROTOCOL.md, "The one-row path"): a record whose key is its own resource's name
 * carries that resource's fence row in `fence_token`, `fence_holder`, so that a write of the key at
 * that fence is decided on the record's row alone (sql.ts, ownWrites). The invariant both triggers
 * keep, which the one-row statements rely on:
 *
 *   a committed record R owned by resource R holds in its copy either nothing (null) or exactly the
 *   committed fence row of R.
 *
 * - `fence_copy` (on `fence`, AFTER INSERT OR UPDATE, per row): every change of a fence row, by any
 *   statement of any instance — a raise, a register, a transfer, putAll, or code that predates the
 *   copy — writes it into record R in the same transaction, after the fence row (the lock order:
 *   fence rows, then records). Its function is VOLATILE, so its UPDATE takes a snapshot of its own
 *   after the fence row is locked: a record R committed by a writer the raise waited for is seen.
 * - `fence_copy_owner` (on `records`, AFTER UPDATE OF resource, per row): a
 *   record moved to another resource loses its copy in the same transaction, so a record moved away
 *   and back never brings an old fence with it. Only transferOwner names `resource` in an UPDATE
 *   (every upsert leaves it). AFTER, not BEFORE: a BEFORE row trigger on UPDATE makes PostgreSQL
 *   lock every updated row before it looks at the column list — a heap-lock WAL record on every
 *   one-row write, which is what the one-row path saves.
 * - The store's record writes at an admitted fence (the fence row locked at exactly that fence, until
 *   commit) set the copy when the key is the resource (upsert-sql.ts): what the fence row holds.
 * Both fire ALWAYS (ENABLE ALWAYS TRIGGER): a session with session_replication_role = replica,
 * which skips ordinary triggers, still keeps the copy. verify() refuses a schema where one is missing
 * or disabled, and migrate() restores it.
 */
export const COPY_TRIGGERS = { fence_copy: "fence", fence_copy_owner: "records" } as const;
export type CopyTrigger = keyof typeof COPY_TRIGGERS;

/** The copy's trigger functions, (re)defined by every migrate(). */
function copyFunctions(names: ObjectNames): string[] {
  const { records, keepCopy, clearCopy } = names;
  return [
    // Writes only a copy that differs, so a raise that left the fence row as it was (the same fence
    // admitted again) writes no record version.
    //
    // Outside READ COMMITTED (a default_transaction_isolation of REPEATABLE READ or SERIALIZABLE), its
    // UPDATE reads the transaction's snapshot, taken before the raise waited for the fence lock, and
    // would miss a record R committed meanwhile (by a writer at the old fence, which set the copy to
    // it). So it first probes the key through the unique index, which sees every committed row: an
    // insert ON CONFLICT DO NOTHING whose conflicting row its snapshot cannot see raises a
    // serialization failure (40001) — the raise fails whole, as a write that waited does at those
    // levels (PROTOCOL.md, "Isolation level"). The probe never inserts: its subtransaction is always
    // rolled back.
    `CREATE OR REPLACE FUNCTION ${keepCopy}() RETURNS trigger LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    BEGIN
      INSERT INTO ${records} (key, value, token, resource) VALUES (NEW.resource, NULL, 0, NEW.resource) ON CONFLICT (key) DO NOTHING;
      RAISE EXCEPTION USING ERRCODE = '${COPY_PROBE}';
    EXCEPTION WHEN SQLSTATE '${COPY_PROBE}' THEN NULL;
    END;
  END IF;
  UPDATE ${records} SET fence_token = NEW.token, fence_holder = NEW.holder
  WHERE key = NEW.resource AND resource = NEW.resource
    AND (fence_token IS DISTINCT FROM NEW.token OR fence_holder IS DISTINCT FROM NEW.holder);
  RETURN NULL;
END
$fn$`,
    `CREATE OR REPLACE FUNCTION ${clearCopy}() RETURNS trigger LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
  UPDATE ${records} SET fence_token = NULL, fence_holder = NULL
  WHERE key = NEW.key AND (fence_token IS NOT NULL OR fence_holder IS NOT NULL);
  RETURN NULL;
END
$fn$`,
  ];
}

/** The DDL of each copy trigger: created when missing, then made to fire always (migrate.ts). */
function copyTriggers(names: ObjectNames): Pick<SchemaStatements, "createCopyTrigger" | "alwaysFires"> {
  const { fence, records, keepCopy, clearCopy } = names;
  return {
    createCopyTrigger: {
      fence_copy: `CREATE TRIGGER fence_copy AFTER INSERT OR UPDATE ON ${fence} FOR EACH ROW EXECUTE FUNCTION ${keepCopy}()`,
      fence_copy_owner: `CREATE TRIGGER fence_copy_owner AFTER UPDATE OF resource ON ${records} FOR EACH ROW EXECUTE FUNCTION ${clearCopy}()`,
    },
    alwaysFires: {
      fence_copy: `ALTER TABLE ${fence} ENABLE ALWAYS TRIGGER fence_copy`,
      fence_copy_owner: `ALTER TABLE ${records} ENABLE ALWAYS TRIGGER fence_copy_owner`,
    },
  };
}
