import type pg from "pg";
import type { FencedPostgres } from "./store.js";

// What the one-row path's tests read straight from the server (own-path.test.ts, own-setup.test.ts).

/** Record `key`'s fence copy and its resource's fence row, as stored: the copy is null or the row. */
export async function copyAndRow(pool: pg.Pool, store: FencedPostgres, key: string) {
  const { rows } = await pool.query<{ copy: string | null; copyHolder: string | null; token: string | null; holder: string | null }>(
    `SELECT r.fence_token::text AS copy, r.fence_holder AS "copyHolder", f.token::text AS token, f.holder
     FROM "${store.schema}".records r LEFT JOIN "${store.schema}".fence f ON f.resource = r.key WHERE r.key = $1`,
    [key],
  );
  return rows[0];
}

/** How many backends of the server wait for a lock: how a test knows a statement is queued. */
export async function lockWaiters(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ n: string }>("SELECT count(*)::text AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'");
  return Number(rows[0]?.n);
}
