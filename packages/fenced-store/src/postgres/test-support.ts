import { randomBytes } from "node:crypto";
import pg from "pg";
import { startPostgres, type StartedPostgres } from "@fenced/servers";
import type { Fence } from "../fence.js";
import { FencedPostgres } from "./store.js";

/**
 * One real PostgreSQL per test file, and a fresh schema per test, so tests never see each other's
 * ratchets or records (also when DATABASE_URL points at a shared server: schemas are dropped after).
 */
export interface PgHarness {
  readonly pool: pg.Pool;
  /** The server's connection string, for a pool of a test's own. */
  readonly url: string;
  readonly source: StartedPostgres["source"];
  /** A migrated store in a schema of its own. */
  store(label: string): Promise<FencedPostgres<pg.PoolClient>>;
  /** The ratchet's value for a resource, read straight from the table. */
  fenceToken(store: FencedPostgres, resource: string): Promise<bigint | undefined>;
  /** A resource's fence row as stored (token and the holder that presented it), read straight from the table. */
  fenceRow(store: FencedPostgres, resource: string): Promise<{ token: bigint; holder: string | null } | undefined>;
  /** A key's row as stored, tombstones included (value undefined), read straight from the table. */
  recordRow(store: FencedPostgres, key: string): Promise<StoredRecord | undefined>;
  /** Row counts of the store's tables: how "nothing was written" is checked. */
  counts(store: FencedPostgres): Promise<{ fence: number; records: number }>;
  close(): Promise<void>;
}

interface StoredRecord {
  /** undefined: a tombstone. */
  readonly value: unknown;
  readonly version: string;
  readonly token: bigint;
  /** The owner. */
  readonly resource: string;
  readonly holder: string | null;
}

export async function pgHarness(): Promise<PgHarness> {
  const server = await startPostgres();
  // Enough connections for 32 concurrent writers plus the test's own reads.
  const pool = new pg.Pool({ connectionString: server.url, max: 48 });
  const schemas: string[] = [];
  return {
    pool,
    url: server.url,
    source: server.source,
    async store(label) {
      const schema = `t_${label}_${randomBytes(4).toString("hex")}`;
      schemas.push(schema);
      const store = new FencedPostgres(pool, { schema });
      await store.migrate();
      return store;
    },
    async fenceToken(store, resource) {
      const { rows } = await pool.query<{ token: string }>(`SELECT token FROM "${store.schema}".fence WHERE resource = $1`, [resource]);
      const token = rows[0]?.token;
      return token === undefined ? undefined : BigInt(token);
    },
    async fenceRow(store, resource) {
      // The whole row as JSON: a column the layout lacks reads as undefined instead of failing the query.
      const { rows } = await pool.query<{ row: { token: number | string; holder?: string | null } }>(
        `SELECT jsonb_set(to_jsonb(f), '{token}', to_jsonb(f.token::text)) AS row FROM "${store.schema}".fence f WHERE resource = $1`,
        [resource],
      );
      const row = rows[0]?.row;
      return row === undefined ? undefined : { token: BigInt(row.token), holder: row.holder ?? null };
    },
    async recordRow(store, key) {
      const { rows } = await pool.query<{
        row: { value: unknown; version: string; token: string; resource: string; holder?: string | null };
        tombstone: boolean;
      }>(
        `SELECT to_jsonb(r) || jsonb_build_object('version', r.version::text, 'token', r.token::text) AS row, r.value IS NULL AS tombstone FROM "${store.schema}".records r WHERE key = $1`,
        [key],
      );
      const found = rows[0];
      if (found === undefined) return undefined;
      const { row } = found;
      return {
        value: found.tombstone ? undefined : row.value,
        version: row.version,
        token: BigInt(row.token),
        resource: row.resource,
        holder: row.holder ?? null,
      };
    },
    async counts(store) {
      const { rows } = await pool.query<{ fence: string; records: string }>(
        `SELECT (SELECT count(*) FROM "${store.schema}".fence) AS fence, (SELECT count(*) FROM "${store.schema}".records) AS records`,
      );
      return { fence: Number(rows[0]?.fence), records: Number(rows[0]?.records) };
    },
    async close() {
      try {
        for (const schema of schemas) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await pool.end();
        await server.stop();
      }
    },
  };
}

/** A promise the test opens by hand: "the process is paused until here". */
export function gate(): { readonly opened: Promise<void>; open(): void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Whether a promise is still pending after the event loop has had `ms` to settle it. */
export async function stillPending(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let settled = false;
  promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  await sleep(ms);
  return !settled;
}

/** Resolves with whatever `p` settles with, a refusal included: an error to assert on as a value. */
export function outcome(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    (v) => v,
    (e: unknown) => e,
  );
}

/** A fence with `holder` when one is given, a holderless fence otherwise. */
export function fenceAt(resource: string, token: bigint, holder?: string): Fence {
  return holder === undefined ? { resource, token } : { resource, token, holder };
}
