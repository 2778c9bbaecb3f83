import { createHash } from "node:crypto";
import { InvalidArgumentError } from "@fenced/fence";
import { fenceLocks } from "./fence-lock.js";
import { objectNames, schemaStatements, type ObjectNames, type SchemaStatements } from "./schema-sql.js";
import { copyOf, putAllOrdered, recordUpserts, setWrite, type ConditionalUpsert, type RecordUpsert } from "./upsert-sql.js";
import { ownWrites, type OwnWrites } from "./own-sql.js";

/**
 * Every SQL text FencedPostgres sends. The only thing ever interpolated is the schema identifier,
 * validated by quoteSchema; every other input travels as a bind parameter.
 *
 * Every write statement takes the fence as its first three parameters: $1 resource, $2 token,
 * $3 holder (null: a fence without a holder).
 */

/** Unquoted-identifier shape; also keeps the name within PostgreSQL's 63-byte NAMEDATALEN limit. */
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/** Validates a schema name and returns it double-quoted, ready for interpolation. */
export function quoteSchema(schema: unknown, argument = "options.schema"): string {
  if (typeof schema !== "string")
    throw new InvalidArgumentError(argument, `must be a string, got ${schema === null ? "null" : typeof schema}`);
  if (!SCHEMA_NAME.test(schema))
    throw new InvalidArgumentError(argument, `must match ${String(SCHEMA_NAME)}, got ${JSON.stringify(schema)}`);
  // CREATE SCHEMA refuses pg_* names; say so before any I/O.
  if (schema.startsWith("pg_")) throw new InvalidArgumentError(argument, "must not start with 'pg_' (reserved by PostgreSQL)");
  return `"${schema}"`;
}

export interface Statements extends SchemaStatements, OwnWrites {
  /**
   * $1 resource, $2 token, $3 holder → one row { token } when admitted, zero rows when fenced. Takes
   * the resource's fence lock exclusively first (fence-lock.ts), as every statement below that locks
   * fence rows does, but the shared writes.
   */
  readonly ratchet: string;
  /** Two fences, $1–$3 and $4–$6, locked in that order → one row { resource } per admitted fence. */
  readonly ratchetPair: string;
  /**
   * Several fences as three arrays of one length (textArray): $1 resources, $2 tokens, $3 holders
   * (NULL: a fence without a holder), locked in array order → one row { resource } per admitted
   * fence. The caller passes them sorted (lockOrder): see the statement for why that is the order
   * PostgreSQL locks them in.
   */
  readonly ratchetAll: string;
  /**
   * $1 resource → { token, holder } | no row: the resource's fence row, the one the ratchet compares
   * every fence against. Read for StaleTokenError after a refusal, and by fence() (inspect.ts).
   */
  readonly highest: string;
  /**
   * $1–$3 fence, $4 key, $5 value (JSON text), $6 the version the write comes after, drawn before it
   * was issued (write-order.ts) → one row { version } when written, zero rows when fenced; raises
   * FOREIGN_KEY_REFUSED (nothing written, the ratchet raise undone) when another resource owns the
   * key, and VERSION_REFUSED, nothing written, when the record is at exactly this fence (token and
   * holder) with a newer version. Its commit is sent with it (commit-at.ts).
   */
  readonly putOrdered: string;
  /** putShared with putOrdered's $6. */
  readonly putOrderedShared: string;
  /**
   * $1–$3 fence, $4 key, $5 value, $6 expected version → one row { version } when written, zero rows
   * when fenced; raises FOREIGN_KEY_REFUSED when another resource owns the key, else VERSION_REFUSED
   * when the record is not live at $6 — either way nothing written, the ratchet raise undone. One
   * statement in its own implicit transaction, like putOrdered (committed by Session.write).
   */
  readonly putIfVersion: string;
  /** $1–$3 fence, $4 key, $5 expected version → one row { version } (the tombstone's) as putIfVersion. */
  readonly deleteIfVersion: string;
  /**
   * putOrdered without its check ($6), putIfVersion and deleteIfVersion at the fence the row already
   * holds: the same record upserts, their row from the shared ratchet (fence-lock.ts, sharedRatchet)
   * instead of a raise. One row { version }: written. Zero rows: the fence row holds another fence
   * (or none); nothing was written, and the caller sends the exclusive statement (Calls.fencedWrite;
   * write-order.ts, nextPut, for a put) — putShared, sent only after an out-of-order refusal, has
   * none: it is stale (nextPut).
   */
  readonly putShared: string;
  readonly putIfVersionShared: string;
  readonly deleteIfVersionShared: string;
  /**
   * $1–$3 fence, $4 key → { version } (the tombstone's: a live record, a tombstone, or no row at all
   * becomes a tombstone owned by $1) | no row (the key belongs to another resource). Run after
   * `ratchet`, in its transaction.
   */
  readonly tombstone: string;
  /**
   * $1 from-resource, $2–$4 the to-fence, $5 key, $6 expected version or null → { version } | no row.
   * Run after `ratchetPair`, in its transaction.
   */
  readonly transferOwner: string;
  /**
   * $1–$3 fence, $4 key, $5 value → { version }: putShared's record upsert without its
   * ratchet, for a write of putAll(), run after `ratchetAll` (or `ratchet`) in its transaction. Raises
   * FOREIGN_KEY_REFUSED when another resource owns the key (the transaction then rolls back).
   */
  readonly putRecord: string;
  /**
   * $1–$3 fence, $4 key, $5 value, $6 expected version → { version }: putIfVersion's record upsert
   * without its ratchet, as putRecord. Raises FOREIGN_KEY_REFUSED or VERSION_REFUSED as putIfVersion.
   */
  readonly putRecordIfVersion: string;
  /**
   * putAll() in one statement, its commit sent with it (commit-at.ts): `ratchetAll`'s $1–$3, then
   * the records in key order as arrays of one length — $4 keys, $5 values (JSON texts), $6 the
   * resource each is under (one of $1), $7 the version each expects (NULL: unconditional) — and $8
   * the version the unconditional ones come after (write-order.ts) → one row { key, version } per
   * record. Every refusal raises, so nothing is written and no ratchet raise stays: FENCE_REFUSED (a
   * stale fence), FOREIGN_KEY_REFUSED, VERSION_REFUSED (an ifVersion that does not hold, or an
   * unconditional record out of order). The caller then runs putAll() as a transaction (batch.ts),
   * whose statements name what was refused.
   */
  readonly putAllOrdered: string;
  /** $1 key → { version, resource, deleted } | no row: the row as it is now, tombstones included. */
  readonly current: string;
  /** $1 key → { value, version, token, resource, holder } | no row (none, or a tombstone). */
  readonly get: string;
}

type FenceLocks = ReturnType<typeof fenceLocks>;

export function statements(schema: string): Statements {
  const names = objectNames(schema);
  const { fence, records } = names;
  const ratchet = ratchets(names, fenceLocks(schema));
  const { conditionalUpsert, recordUpsert } = recordUpserts(names);
  return {
    ...schemaStatements(names),
    ratchet: ratchet.one,
    ratchetPair: ratchet.pair,
    ratchetAll: `${ratchet.all}
RETURNING f.resource`,
    // Exactly the columns the ratchet's WHERE compares, from the row it compares them on. A plain
    // SELECT: in READ COMMITTED it shows the row as last committed when the statement starts, takes no
    // row lock, and so neither waits for nor delays a writer holding the row (whose raise shows once
    // it commits). No row: nothing was ever admitted for the resource (no write, no register()).
    highest: `SELECT token, holder FROM ${fence} WHERE resource = $1`,
    ...singleStatementWrites(ratchet, conditionalUpsert, recordUpsert),
    ...ownWrites(names),
    ...writesAfterTheRatchets(names, conditionalUpsert, recordUpsert),
    putAllOrdered: putAllOrdered(names, ratchet.all),
    current: `SELECT version, resource, value IS NULL AS deleted FROM ${records} WHERE key = $1`,
    get: `SELECT value, version, token, resource, holder FROM ${records} WHERE key = $1 AND value IS NOT NULL`,
  };
}

/** The ratchets a statement starts with: the raise of a fence row, and the shared check of a write at the fence the row holds. */
interface Ratchets {
  /** `ratchet`: $1–$3 → { token } when admitted. */
  readonly one: string;
  /** `ratchetPair`: $1–$3 and $4–$6 → { resource } per admitted fence. */
  readonly pair: string;
  /** `ratchetAll` without its RETURNING: $1–$3 the fences as arrays of one length. */
  readonly all: string;
  /** sharedRatchet (fence-lock.ts): $1–$3 → { token } when the row holds exactly this fence. */
  readonly shared: string;
}

function ratchets(names: ObjectNames, locks: FenceLocks): Ratchets {
  const { fence } = names;
  const { lockAllExclusive, lockExclusive, sharedRatchet } = locks;

  // Admission, the same rule as admits() in @fenced/fence: a higher token, or the same token from the
  // same holder (IS NOT DISTINCT FROM: two holderless fences at one token are the same lease).
  const admits = "f.token < EXCLUDED.token OR (f.token = EXCLUDED.token AND f.holder IS NOT DISTINCT FROM EXCLUDED.holder)";
  // The ratchet. ON CONFLICT DO UPDATE locks the conflicting row and evaluates its WHERE on the
  // newest committed version of that row, even one our snapshot cannot see (READ COMMITTED), so two
  // writers of one resource are ordered by the row lock and a lower token, or an equal token from
  // another holder, can never pass a higher one. The row stays locked until the transaction ends
  // even when the WHERE refuses. An equal token from the same holder rewrites the row with the same
  // values (a new row version). Locking it without the update — a CTE `SELECT … FOR NO KEY UPDATE`
  // of the row at exactly this token and holder, and this INSERT only when that found nothing —
  // saves a WAL record and a row version per write but measured no faster end to end: the second
  // CTE and the INSERT's executor set-up, paid even when it inserts nothing, cost what it saves.
  // The row comes from a SELECT whose WHERE takes the resource's fence lock first (fence-lock.ts).
  const ratchetOf = (rows: string): string => `INSERT INTO ${fence} AS f (resource, token, holder) ${rows}
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, holder = EXCLUDED.holder WHERE ${admits}`;
  const ratchet = `${ratchetOf(`SELECT $1::text, $2::bigint, $3::text WHERE ${lockExclusive("$1")}`)}
RETURNING f.token`;

  return {
    one: ratchet,
    // Multi-row VALUES are inserted (and their conflicting rows locked) in list order: the caller
    // passes the two fences sorted by resource, so two transfers never lock them in opposite orders.
    // Both fence locks are taken first, in key order (fence-lock.ts).
    pair: `${ratchetOf(`SELECT v.resource, v.token, v.holder FROM (VALUES ($1::text, $2::bigint, $3::text), ($4::text, $5::bigint, $6::text)) AS v(resource, token, holder)
WHERE ${lockAllExclusive("ARRAY[$1::text, $4::text]")}`)}
RETURNING f.resource`,
    // Every fence of a call of several (transaction(), register(), putAll()), each admitted or refused
    // exactly as by `ratchet`, in one statement. The rows must be locked in one order every writer
    // shares, or two writers with overlapping sets could each hold a row the other waits for
    // (deadlock: PostgreSQL aborts one with 40P01 after deadlock_timeout). That order is lockOrder(),
    // applied by the caller to the arrays, and the statement keeps it:
    // - an INSERT's ModifyTable node takes its rows one at a time from its subplan and finishes each —
    //   inserting it, or finding the conflicting row, waiting for its writer and locking it, then
    //   evaluating the DO UPDATE's WHERE — before it asks for the next one;
    // - the subplan is the SELECT, whose ORDER BY t.n (the array index, from WITH ORDINALITY) is the
    //   top-level ordering of that query: the rows leave it in array order. (The plan has no Sort
    //   node: the planner knows a function scan returns its ordinality column ascending, and takes
    //   that as the order ORDER BY asks for; a plan that did not provide it would sort.) No collation
    //   is involved: the order is the one the caller sorted by;
    // - a row refused by the WHERE stays locked until the transaction ends, like an admitted one, and
    //   the statement goes on to the next: every row of the set is locked, in order, before the
    //   statement returns, and nothing else of the call runs before that.
    // The other statements that lock fence rows lock one (`ratchet`) or two in the same order
    // (`ratchetPair`), and every call locks its fence rows before any record: so no two calls of the
    // store ever wait for each other's fence rows in a cycle (records: putAll()'s order, batch.ts).
    // Before any row, the statement takes every resource's fence lock, in key order (fence-lock.ts).
    all: `INSERT INTO ${fence} AS f (resource, token, holder)
SELECT t.resource, t.token, t.holder FROM unnest($1::text[], $2::bigint[], $3::text[]) WITH ORDINALITY AS t(resource, token, holder, n)
WHERE ${lockAllExclusive("$1::text[]")}
ORDER BY t.n
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, holder = EXCLUDED.holder WHERE ${admits}`,
    shared: sharedRatchet(fence),
  };
}

/** The writes that are one statement, the ratchet (or the shared check) as their CTE. */
function singleStatementWrites(
  { one: ratchet, shared }: Ratchets,
  conditionalUpsert: ConditionalUpsert,
  recordUpsert: RecordUpsert,
): Pick<
  Statements,
  "putOrdered" | "putIfVersion" | "deleteIfVersion" | "putShared" | "putOrderedShared" | "putIfVersionShared" | "deleteIfVersionShared"
> {
  // `admission`: the ratchet CTE — a raise (`ratchet`), or the shared check of a write at the fence the row holds.
  const conditionalWrite = (admission: string, value: string, expected: string): string =>
    `WITH ratchet AS (${admission})
${conditionalUpsert("ratchet", value, expected)}`;
  return {
    // One statement, one round trip, one implicit transaction. The record insert reads its row FROM
    // the ratchet CTE, so it runs only after the ratchet has locked and raised the fence row, and
    // inserts nothing when the ratchet returned nothing (zero rows back: fenced). The upsert writes
    // every column from its own parameters and never reads the old row, so the statement's (possibly
    // older) snapshot cannot make it lose a write: ON CONFLICT finds the newest committed row
    // regardless of the snapshot, waiting for an uncommitted one (another resource creating the key)
    // to commit or roll back, and locks it before evaluating its WHERE on that newest version. The
    // WHERE keeps the owner: a key owned by another resource is not updated. The ratchet CTE has
    // raised our fence row by then, so the statement must fail, not just write nothing: the CASE
    // (which evaluates its ELSE only when the owner differs) calls the refuse function, which
    // raises; the implicit transaction aborts, and the raise is undone with it. So one row back
    // always means written, and nothing but the fence (and the write order's check, $6: the version
    // the write comes after, which raises too) decides between one row and none.
    putOrdered: `WITH ratchet AS (${ratchet})
${recordUpsert("ratchet", "$6::bigint")}`,
    putIfVersion: conditionalWrite(ratchet, "$5::jsonb", "$6"),
    deleteIfVersion: conditionalWrite(ratchet, "NULL::jsonb", "$5"),
    putShared: `WITH ratchet AS (${shared})
${recordUpsert("ratchet", "NULL")}`,
    putOrderedShared: `WITH ratchet AS (${shared})
${recordUpsert("ratchet", "$6::bigint")}`,
    putIfVersionShared: conditionalWrite(shared, "$5::jsonb", "$6"),
    deleteIfVersionShared: conditionalWrite(shared, "NULL::jsonb", "$5"),
  };
}

/** The statements a transaction runs after its ratchets, each in a fresh snapshot. */
function writesAfterTheRatchets(
  names: ObjectNames,
  conditionalUpsert: ConditionalUpsert,
  recordUpsert: RecordUpsert,
): Pick<Statements, "tombstone" | "transferOwner" | "putRecord" | "putRecordIfVersion"> {
  const { records, versions } = names;
  return {
    // An unconditional delete must also reach a record written while we waited for the fence lock,
    // which the waiting statement's snapshot cannot see; so it runs as its own statement after the
    // ratchet, and its fresh snapshot sees every write this resource committed before us. It always
    // writes a tombstone, as a put writes a record: over a live record or a tombstone of this
    // resource (a new version), or, for a key never written, a new row that makes the key this
    // resource's. ON CONFLICT finds the newest committed row (waiting for another resource creating
    // the key to commit or roll back) and locks it; the WHERE keeps the owner, so a key of another
    // resource is left alone and no row comes back (the caller then reports the owner and rolls back).
    tombstone: `INSERT INTO ${records} AS r (key, value, token, resource, holder, fence_token, fence_holder)
VALUES ($4, NULL, $2::bigint, $1, $3, ${copyOf("$2::bigint")})
ON CONFLICT (key) DO UPDATE
SET ${setWrite(names)}
WHERE r.resource = EXCLUDED.resource
RETURNING r.version`,
    // Its own statement after both ratchets, for the same reason as `tombstone`. The record is then
    // a write of the to-fence: new owner, its token and holder, a new version (so an ifVersion read
    // before the move fails after it). A tombstone moves too.
    transferOwner: `UPDATE ${records} SET resource = $2, token = $3::bigint, holder = $4, version = nextval('${versions}')
WHERE key = $5 AND resource = $1 AND ($6::bigint IS NULL OR (version = $6::bigint AND value IS NOT NULL))
RETURNING version`,
    // putAll()'s writes, one statement per record, sent in key order after the ratchets, in their
    // transaction: the same upserts as the single-statement writes, their row from the parameters
    // instead of the ratchet CTE (every fence row is locked and raised by then). Each is its own
    // statement, so it takes a fresh snapshot; the decision never reads the snapshot anyway (ON
    // CONFLICT finds the newest committed row). A refusal raises (FN001, FN002) and names this key:
    // the transaction can then only roll back, and every ratchet raise goes with it.
    putRecord: recordUpsert("values", "NULL"),
    putRecordIfVersion: conditionalUpsert("values", "$5::jsonb", "$6"),
  };
}

/**
 * The one order in which every call locks several fence rows (transfer(), and the calls that take
 * several fences): by resource, comparing UTF-16 code units (JavaScript's `<`), a total order on
 * strings that does not depend on the database's collation. Returns a sorted copy.
 */
export function lockOrder<F extends { readonly resource: string }>(fences: readonly F[]): F[] {
  return [...fences].sort((a, b) => (a.resource < b.resource ? -1 : a.resource > b.resource ? 1 : 0));
}

/**
 * A one-dimensional PostgreSQL array literal of texts (null: NULL), for a `$n::text[]` or
 * `$n::bigint[]` parameter: every element double-quoted, its backslashes and double quotes escaped
 * (PostgreSQL manual, "Arrays", array value input), so no element can split or end the array. Keeps
 * every parameter a string (PgParam), whatever client the pool is.
 */
export function textArray(values: readonly (string | null)[]): string {
  return `{${values.map((v) => (v === null ? "NULL" : `"${v.replace(/[\\"]/g, "\\$&")}"`)).join(",")}}`;
}

/** The DDL, run once per migrate() as plain text; every other statement travels prepared, by name. */
const DDL = [
  "migrate",
  "addFenceHolder",
  "addRecordHolder",
  "allowTombstones",
  "addFenceCopy",
  "createCopyTrigger",
  "alwaysFires",
  "orderVersions",
  "restoreVersionDefault",
  "lockRecords",
  "lockFence",
  "clearCopies",
] as const;
export type NamedStatement = Exclude<keyof Statements, (typeof DDL)[number]>;

/**
 * Prepared statement names for one schema's statements. PostgreSQL truncates names to 63 bytes, and
 * a pg client refuses to reuse a name for another text on one connection, so every name must be
 * short and belong to one text. The name carries 132 bits of the SHA-256 of the statement's text
 * (which names the schema): two different texts would share a name only through a hash collision,
 * whatever the schema's length, and two stores on one pool never run each other's statements.
 */
export function statementNames(sql: Statements): Record<NamedStatement, string> {
  const names = {} as Record<NamedStatement, string>;
  for (const key of Object.keys(sql) as (keyof Statements)[]) {
    if ((DDL as readonly string[]).includes(key)) continue;
    const digest = createHash("sha256")
      .update(sql[key as NamedStatement])
      .digest("base64url")
      .slice(0, 22);
    names[key as NamedStatement] = `fenced:${key}:${digest}`;
  }
  return names;
}

/** Transaction control for the multi-statement operations (deletes, transfer(), transaction(), migrate()). */
const BEGIN = "BEGIN";

/**
 * BEGIN, in the same round trip telling the server to give up on any one statement of the
 * transaction within `ms` too (statement_timeout): it then cancels the statement and the transaction
 * can only roll back, releasing its locks — the fence row among them — even when this process has
 * stopped listening. SET LOCAL ends with the transaction, so the pool's connection keeps its own
 * settings. (Not idle_in_transaction_session_timeout: it ends the session with a FATAL error that
 * can reach a connection the store has just handed back to the pool for closing, which the pool
 * then reports as its own 'error'.)
 */
export function beginWithin(ms: number): string {
  // The only number spliced into SQL: a positive integer, checked here.
  if (!Number.isSafeInteger(ms) || ms < 1) throw new RangeError(`beginWithin: ${ms} is not a positive integer number of milliseconds`);
  return `${BEGIN}; SET LOCAL statement_timeout = ${ms}`;
}

export const COMMIT = "COMMIT";
export const ROLLBACK = "ROLLBACK";
