import pg from "pg";
import { CutProxy } from "./cut-proxy-test-support.js";
import { FencedPostgres } from "./store.js";
import { outcome } from "./test-support.js";

/** A store on one connection through a proxy, and the statements its client sends, by name, in order. */
export interface CountedStore {
  readonly store: FencedPostgres;
  readonly proxy: CutProxy;
  readonly sent: string[];
  close(): Promise<void>;
}

/** A store in `schema` of the server at `url`, its one connection through a CutProxy, every statement it sends named in `sent`. */
export async function countedStore(url: string, schema: string, timeoutMs?: number): Promise<CountedStore> {
  const via = new URL(url);
  const proxy = await CutProxy.start({ host: via.hostname, port: Number(via.port) });
  via.host = `127.0.0.1:${proxy.port}`;
  const pool = new pg.Pool({ connectionString: via.toString(), max: 1 });
  pool.on("error", () => undefined);
  const sent: string[] = [];
  pool.on("connect", (client) => {
    // Every statement of the store leaves through client.query (Session.send): counted there.
    const query = client.query.bind(client) as (config: { name?: string; text?: string }) => unknown;
    (client as unknown as { query: typeof query }).query = (config) => {
      sent.push(config.name?.split(":")[1] ?? config.text ?? "");
      return query(config);
    };
  });
  const store = new FencedPostgres(pool, timeoutMs === undefined ? { schema } : { schema, timeoutMs });
  return {
    store,
    proxy,
    sent,
    async close() {
      await pool.end();
      await proxy.close();
    },
  };
}

/** The statements `call` sent, and what it settled with (an error as a value). */
export async function sentBy(sent: string[], call: () => Promise<unknown>): Promise<{ value: unknown; statements: string[] }> {
  const from = sent.length;
  const value = await outcome(call());
  return { value, statements: sent.slice(from) };
}
