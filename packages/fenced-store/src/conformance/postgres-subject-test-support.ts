import pg from "pg";
import { freePort } from "@fenced/servers";
import type { PgPool, PgQueryConfig, PgRecord } from "../postgres/types.js";
import { FencedPostgres } from "../postgres/store.js";
import { pgHarness } from "../postgres/test-support.js";
import type { Subject } from "./subject-test-support.js";

/** FencedPostgres on a real PostgreSQL: a migrated schema per open(). */
export async function postgresSubject(): Promise<Subject<unknown, PgRecord>> {
  const h = await pgHarness();
  const refusing: pg.Pool[] = [];
  let opened = 0;
  return {
    async open() {
      const store = await h.store(`conformance${++opened}`);
      return {
        store,
        again: new FencedPostgres(h.pool, { schema: store.schema }),
        // Every row of both tables, ordered: "nothing was written" is this, equal before and after.
        state: async () => {
          const { rows } = await h.pool.query(
            `SELECT (SELECT coalesce(jsonb_agg(to_jsonb(f) ORDER BY resource), '[]') FROM "${store.schema}".fence f) AS fence,
                    (SELECT coalesce(jsonb_agg(to_jsonb(r) ORDER BY key), '[]') FROM "${store.schema}".records r) AS records`,
          );
          return rows[0] as unknown;
        },
      };
    },
    async unreachable() {
      const pool = new pg.Pool({
        connectionString: `postgres://fenced@127.0.0.1:${await freePort()}/fenced`,
        connectionTimeoutMillis: 2_000,
      });
      refusing.push(pool);
      let tries = 0;
      // The pool as the store sees it, each connection and statement it asks for counted.
      const typed: PgPool = pool;
      const counted: PgPool = {
        query: <R>(config: PgQueryConfig) => (tries++, typed.query<R>(config)),
        connect: ((callback?: never) => (tries++, callback === undefined ? typed.connect() : typed.connect(callback))) as PgPool["connect"],
      };
      return { store: new FencedPostgres(counted, { timeoutMs: 2_000 }), tries: () => tries };
    },
    value: (text) => text,
    text: (read) => Promise.resolve(read.value as string),
    async stop() {
      await Promise.all(refusing.map((pool) => pool.end()));
      await h.close();
    },
  };
}
