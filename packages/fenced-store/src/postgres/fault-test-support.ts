import { randomBytes } from "node:crypto";
import pg from "pg";
import { startPostgres, type ServerFaults, type StartedPostgres } from "@fenced/servers";
import { sleep } from "./test-support.js";
import { FencedPostgres } from "./store.js";

/**
 * A PostgreSQL of the test file's own, with its faults (pause, kill, restart), and a pool built the
 * way an application should build one: with pool.on("error") for its idle clients, which pg requires.
 */
export interface FaultHarness {
  readonly server: StartedPostgres & { readonly faults: ServerFaults };
  readonly faults: ServerFaults;
  readonly pool: pg.Pool;
  /** Errors the pool reported for idle clients (a dead server closes them). */
  readonly idleErrors: Error[];
  /** A migrated store in a schema of its own, with the given deadline. */
  store(label: string, timeoutMs?: number): Promise<FencedPostgres<pg.PoolClient>>;
  /** A client of the test's own, outside the pool, its errors ignored (the server may die under it). */
  client(url?: string): Promise<pg.Client>;
  /** Resolves once `count` backends wait for a lock (or an advisory lock): the operation under test is in flight. */
  waitForLockWaits(count: number): Promise<void>;
  close(): Promise<void>;
}

export async function faultHarness(max = 8): Promise<FaultHarness> {
  const server = await startPostgres({ faults: true });
  const pool = new pg.Pool({ connectionString: server.url, max });
  const idleErrors: Error[] = [];
  pool.on("error", (err) => idleErrors.push(err));
  const clients: pg.Client[] = [];
  const harness: FaultHarness = {
    server,
    faults: server.faults,
    pool,
    idleErrors,
    async store(label, timeoutMs = 1_000) {
      const schema = `t_${label}_${randomBytes(4).toString("hex")}`;
      // Set up outside the deadline under test: on a loaded machine migrate() can outlast a short one.
      await new FencedPostgres(pool, { schema, timeoutMs: 60_000 }).migrate();
      return new FencedPostgres(pool, { schema, timeoutMs });
    },
    async client(url = server.url) {
      const client = new pg.Client({ connectionString: url });
      client.on("error", () => undefined);
      await client.connect();
      clients.push(client);
      return client;
    },
    async waitForLockWaits(count) {
      const watcher = await harness.client();
      try {
        for (let i = 0; i < 400; i++) {
          const { rows } = await watcher.query<{ n: string }>(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
          );
          if (Number(rows[0]?.n) >= count) return;
          await sleep(10);
        }
        throw new Error(`no ${count} backends waiting for a lock after 4 s`);
      } finally {
        await watcher.end().catch(() => undefined);
      }
    },
    async close() {
      await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
      server.faults.resume();
      await pool.end().catch(() => undefined);
      await server.stop();
    },
  };
  return harness;
}

/** How long a promise took to settle, and what it settled with (a refusal as a value). */
export async function timed(p: Promise<unknown>): Promise<{ ms: number; value: unknown }> {
  const started = performance.now();
  const value = await p.then(
    (v) => v,
    (e: unknown) => e,
  );
  return { ms: performance.now() - started, value };
}
