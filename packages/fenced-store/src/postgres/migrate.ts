import { StoreSetupError } from "../errors.js";
import { COPY_TRIGGERS, objectNames, type CopyTrigger } from "./schema-sql.js";
import type { Session } from "./session.js";
import { beginWithin, COMMIT, quoteSchema, ROLLBACK, type NamedStatement, type Statements } from "./sql.js";
import type { PgClient, PgParam, PgQueryConfig } from "./types.js";

/**
 * FencedPostgres.migrate(), inside its session: creates the schema, tables, sequence and function if
 * missing, and upgrades a layout an earlier version created, in one transaction, serialised with
 * every other migrate() of the same schema by a session advisory lock. The lock is released whatever
 * happens; a failure discards the connection (which also drops a lock the unlock could not release).
 */
export async function migrateWithin<Client extends PgClient>(
  s: Session<Client>,
  sql: Statements,
  schema: string,
  query: (name: NamedStatement, values: PgParam[]) => PgQueryConfig,
): Promise<void> {
  const lock: PgParam[] = [`fenced.migrate:${schema}`];
  await s.query(query("migrateLock", lock), "read");
  let failure: { err: unknown } | undefined;
  try {
    await s.query({ text: beginWithin(s.remainingMs()) }, "read");
    for (const ddl of sql.migrate) await s.query({ text: ddl }, "read");
    for (const ddl of await upgrades(s, sql, schema, query)) await s.query({ text: ddl }, "read");
    await advanceVersions(s, sql, query);
    await s.query({ text: COMMIT }, "commit");
  } catch (err) {
    failure = { err };
    await s.rollback(ROLLBACK);
  }
  try {
    await s.query(query("migrateUnlock", lock), "read");
  } catch (err) {
    // Closing the connection drops a session lock still held; a committed migration stays committed.
    s.discard(err);
  }
  if (failure !== undefined) {
    s.discard(failure.err);
    throw failure.err;
  }
}

/** The ALTERs an older or altered layout needs; none on a current one (ALTER would lock for nothing). */
async function upgrades<Client extends PgClient>(
  s: Session<Client>,
  sql: Statements,
  schema: string,
  query: (name: NamedStatement, values: PgParam[]) => PgQueryConfig,
): Promise<string[]> {
  const { rows } = await s.query<{ table: string; column: string; notNull: boolean }>(query("layout", [schema]), "read");
  const has = (table: string, column: string) => rows.find((r) => r.table === table && r.column === column);
  const needed: string[] = [];
  if (has("fence", "holder") === undefined) needed.push(sql.addFenceHolder);
  if (has("records", "holder") === undefined) needed.push(sql.addRecordHolder);
  if (has("records", "value")?.notNull === true) needed.push(sql.allowTombstones);
  needed.push(
    ...(await copyUpgrades(
      s,
      sql,
      schema,
      query,
      has("records", "fence_token") === undefined || has("records", "fence_holder") === undefined,
    )),
  );
  // A sequence someone altered (a per-session cache, a negative step, a wrap-around) would hand a later
  // write a smaller version, and a late put could land over it (write-order.ts): put it back.
  const { rows: sequence } = await s.query<{ increment: string; cache: string; cycle: boolean }>(
    query("versionSequence", [schema]),
    "read",
  );
  const shape = sequence[0];
  if (shape !== undefined && (BigInt(shape.increment) <= 0n || shape.cache !== "1" || shape.cycle)) needed.push(sql.orderVersions);
  // A sequence dropped with CASCADE took the default with it (the DDL above created the sequence again):
  // a new key's insert would then fail (23502), or take a version the sequence never handed out.
  const { rows: drawn } = await s.query<{ draws: boolean }>(query("versionDefault", [schema]), "read");
  if (drawn[0]?.draws !== true) needed.push(sql.restoreVersionDefault);
  return needed;
}

/**
 * The copy triggers that are missing or do not fire always (schema-sql.ts, COPY_TRIGGERS), each
 * paired with what restores it. Created in migrate()'s transaction, after the columns they write:
 * from its COMMIT on, every raise keeps the copy, and no copy is written before (a missing copy
 * never admits).
 */
async function copyTriggerProblems<Client extends PgClient>(
  s: Session<Client>,
  schema: string,
  query: (name: NamedStatement, values: PgParam[]) => PgQueryConfig,
): Promise<{ trigger: CopyTrigger; missing: boolean }[]> {
  const { rows } = await s.query<{ table: string; name: string; enabled: string }>(query("triggers", [schema]), "read");
  const problems: { trigger: CopyTrigger; missing: boolean }[] = [];
  for (const [trigger, table] of Object.entries(COPY_TRIGGERS) as [CopyTrigger, string][]) {
    const found = rows.find((r) => r.table === table && r.name === trigger);
    if (found === undefined || found.enabled !== "A") problems.push({ trigger, missing: found === undefined });
  }
  return problems;
}

/**
 * What the copy needs (schema-sql.ts, COPY_TRIGGERS), none on a current layout: `fence` locked first
 * (lockFence: the order every writer locks the tables in, and no raise until COMMIT), the columns
 * when missing, each trigger that is missing or does not fire always, and — after a trigger was
 * restored on columns that existed — every copy forgotten (clearCopies: one a raise left behind while
 * the trigger did not fire must not admit).
 */
async function copyUpgrades<Client extends PgClient>(
  s: Session<Client>,
  sql: Statements,
  schema: string,
  query: (name: NamedStatement, values: PgParam[]) => PgQueryConfig,
  addColumns: boolean,
): Promise<string[]> {
  const repairs = (await copyTriggerProblems(s, schema, query)).flatMap(({ trigger, missing }) =>
    missing ? [sql.createCopyTrigger[trigger], sql.alwaysFires[trigger]] : [sql.alwaysFires[trigger]],
  );
  if (!addColumns && repairs.length === 0) return [];
  return [sql.lockFence, ...(addColumns ? [sql.addFenceCopy] : []), ...repairs, ...(addColumns ? [] : [sql.clearCopies])];
}

/** The version a sequence that is behind must pass (the newest of any record), or undefined: it is ahead of every record. */
async function behind<Client extends PgClient>(
  s: Session<Client>,
  query: (name: NamedStatement, values: PgParam[]) => PgQueryConfig,
): Promise<{ next: string; newest: string } | undefined> {
  const { rows } = await s.query<{ next: string; newest: string | null }>(query("versionPosition", []), "read");
  const row = rows[0];
  return row?.newest == null || BigInt(row.next) > BigInt(row.newest) ? undefined : { next: row.next, newest: row.newest };
}

/**
 * Moves the version sequence past every record's version when it is behind (set back by RESTART or
 * setval, or dropped and created again at 1): a write would otherwise take a version at or below
 * one a store instance has heard of, and a late put whose `after` is above it would land over that
 * write (write-order.ts). Invariant kept: the sequence's next value is above max(version). The
 * sequence is read again under lockRecords, so no writer draws a version between that read and
 * setval (which would move the sequence back under it); the lock is taken only when a move is needed.
 */
async function advanceVersions<Client extends PgClient>(
  s: Session<Client>,
  sql: Statements,
  query: (name: NamedStatement, values: PgParam[]) => PgQueryConfig,
): Promise<void> {
  if ((await behind(s, query)) === undefined) return;
  await s.query({ text: sql.lockRecords }, "read");
  const stale = await behind(s, query);
  if (stale !== undefined) await s.query(query("advanceVersions", [stale.newest]), "read");
}

/**
 * FencedPostgres.verify(), inside its session: what migrate() repairs, checked without changing
 * anything — the tables exist, the version sequence is ahead of every record, and new records draw
 * from it. StoreSetupError "not-migrated", naming the fix, when one does not hold.
 */
export async function verifyWithin<Client extends PgClient>(
  s: Session<Client>,
  schema: string,
  query: (name: NamedStatement, values: PgParam[]) => PgQueryConfig,
): Promise<void> {
  const names = objectNames(quoteSchema(schema));
  const { records, versions } = names;
  const stale = await behind(s, query);
  if (stale !== undefined)
    throw new StoreSetupError(
      "postgres",
      "not-migrated",
      `the version sequence ${versions} would hand out ${stale.next} next, not above the newest record version ${stale.newest} (set back by RESTART or setval, or dropped?): a late put could land over a later write. Run migrate(), which moves it past, or SELECT setval('${versions}', ${stale.newest})`,
    );
  const { rows } = await s.query<{ draws: boolean }>(query("versionDefault", [schema]), "read");
  if (rows[0]?.draws !== true)
    throw new StoreSetupError(
      "postgres",
      "not-migrated",
      `the default of ${records}.version does not draw from ${versions} (dropped with DROP SEQUENCE … CASCADE?): run migrate(), which restores it`,
    );
  const [problem] = await copyTriggerProblems(s, schema, query);
  if (problem !== undefined)
    throw new StoreSetupError(
      "postgres",
      "not-migrated",
      `the trigger ${problem.trigger} on ${names[COPY_TRIGGERS[problem.trigger]]} is ${problem.missing ? "missing" : "not enabled ALWAYS"}: a fence copy could fall behind its fence row. Run migrate(), which restores it`,
    );
}
