import { randomBytes } from "node:crypto";
import pg from "pg";
import { startPostgres, type StartedPostgres } from "@fenced/servers";
import { FencedPostgres } from "./postgres.js";

/**
 * One real PostgreSQL per test file, and a fresh schema per test, so tests never see each other's
 * ratchets or records (also when DATABASE_URL points at a shared server: schemas are dropped after).
 */
export interface PgHarness {
  readonly pool: pg.Pool;
  readonly source: StartedPostgres["source"];
  /** A migrated store in a schema of its own. */
  store(label: string): Promise<FencedPostgres>;
  /** The ratchet's value for a resource, read straight from the table. */
  fenceToken(store: FencedPostgres, resource: string): Promise<bigint | undefined>;
  /** Row counts of the store's tables: how "nothing was written" is checked. */
  counts(store: FencedPostgres): Promise<{ fence: number; records: number }>;
  close(): Promise<void>;
}

export async function pgHarness(): Promise<PgHarness> {
  const server = await startPostgres();
  // Enough connections for 32 concurrent writers plus the test's own reads.
  const pool = new pg.Pool({ connectionString: server.url, max: 48 });
  const schemas: string[] = [];
  return {
    pool,
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
