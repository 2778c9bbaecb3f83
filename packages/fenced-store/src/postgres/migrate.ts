import type { Session } from "./session.js";
import { beginWithin, COMMIT, ROLLBACK, type NamedStatement, type Statements } from "./sql.js";
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
  // A sequence someone altered (a per-session cache, a negative step, a wrap-around) would hand a later
  // write a smaller version, and a late put could land over it (write-order.ts): put it back.
  const { rows: sequence } = await s.query<{ increment: string; cache: string; cycle: boolean }>(
    query("versionSequence", [schema]),
    "read",
  );
  const shape = sequence[0];
  if (shape !== undefined && (BigInt(shape.increment) <= 0n || shape.cache !== "1" || shape.cycle)) needed.push(sql.orderVersions);
  return needed;
}
