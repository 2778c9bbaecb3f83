import { createRequire } from "node:module";
import pgNewest from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutcomeUnknownError, StoreUnavailableError } from "../errors.js";
import { CutProxy, FLUSH_THEN_SYNC } from "./cut-proxy-test-support.js";
import { FencedPostgres } from "./store.js";
import { fenceAt as f, outcome, pgHarness, type PgHarness } from "./test-support.js";

// Session.write sees when an unordered put's commit (its Sync) leaves through pg's protocol
// connection: the events it emits for the server's messages, `dataRow` and `commandComplete`, which
// pg does not document. The package declares pg ^8.11.0: the oldest and the newest 8.x are run here,
// and a pg that stopped emitting them fails the first test by name.

const require = createRequire(import.meta.url);
/** pg 8.11.0 (an npm alias: a devDependency), which ships no types of its own: pg's, which it has. */
const pgOldest = require("pg-8-11") as typeof pgNewest;
const PG = [
  { name: `pg ${(require("pg-8-11/package.json") as { version: string }).version}`, pg: pgOldest },
  { name: `pg ${(require("pg/package.json") as { version: string }).version}`, pg: pgNewest },
];

let h: PgHarness;
beforeAll(async () => {
  h = await pgHarness();
});
afterAll(async () => {
  await h.close();
});

describe.each(PG)("$name", ({ pg }) => {
  /** A pool of this pg whose connections go through a proxy that can lose one answer. */
  async function throughProxy(): Promise<{ pool: pgNewest.Pool; proxy: CutProxy; close(): Promise<void> }> {
    const url = new URL(h.url);
    const proxy = await CutProxy.start({ host: url.hostname, port: Number(url.port) });
    url.host = `127.0.0.1:${proxy.port}`;
    const pool = new pg.Pool({ connectionString: url.toString(), max: 1 });
    pool.on("error", () => undefined);
    return {
      pool,
      proxy,
      async close() {
        await pool.end();
        await proxy.close();
      },
    };
  }

  it("emits dataRow and commandComplete on the client's protocol connection, and sends a query's Sync (rows set) only once commandComplete is emitted", async () => {
    const client = new pg.Client({ connectionString: h.url });
    await client.connect();
    try {
      const connection = (client as unknown as { connection?: NodeJS.EventEmitter }).connection;
      expect(typeof connection?.on, "pg no longer exposes client.connection: Session.write cannot see when a Sync leaves").toBe("function");
      const seen: string[] = [];
      const stream = (connection as unknown as { stream: { write: (chunk: Buffer, ...rest: unknown[]) => boolean } }).stream;
      const write = stream.write.bind(stream);
      stream.write = (chunk: Buffer, ...rest: unknown[]) => {
        if (chunk.length === 5 && chunk[0] === 0x53) seen.push("Sync");
        return write(chunk, ...rest);
      };
      // First in line: what pg does on each event (the Sync in its commandComplete handler) comes after.
      for (const event of ["dataRow", "commandComplete"]) connection?.prependListener(event, () => seen.push(event));
      await client.query({ text: "SELECT 1 AS one", rows: 2 ** 31 - 1 } as pgNewest.QueryConfig);
      expect(
        seen,
        "pg no longer emits dataRow and commandComplete before the Sync of a query with rows: Session.write would read a lost commit as nothing applied",
      ).toEqual(["dataRow", "commandComplete", "Sync"]);
    } finally {
      await client.end();
    }
  });

  it("an unordered put that wrote, its Sync's answer lost: OutcomeUnknownError, it landed; one that wrote nothing: StoreUnavailableError", async () => {
    const seed = await h.store("pg_versions");
    const via = await throughProxy();
    try {
      const store = new FencedPostgres(via.pool, { schema: seed.schema, timeoutMs: 2_000 });
      const fence = f("r", 1n, "h1");
      await store.get("k");
      // Written at this fence by another store: the put is refused as out of order, then sent unordered.
      await seed.put("k", "seed", { fence });
      via.proxy.arm(FLUSH_THEN_SYNC);
      expect(await outcome(store.put("k", "landed", { fence }))).toBeInstanceOf(OutcomeUnknownError);
      expect(await seed.get("k")).toMatchObject({ value: "landed" });
      // Again, with the fence raised before the unordered statement runs: it writes nothing, and its
      // Sync's answer lost is StoreUnavailableError.
      await store.get("k");
      await seed.put("k", "seed again", { fence });
      via.proxy.arm(FLUSH_THEN_SYNC);
      via.proxy.holdFrom(Buffer.from("fenced:putShared:"));
      const pending = outcome(store.put("k", "not landed", { fence }));
      await expect.poll(() => via.proxy.holding).toBe(true);
      await seed.register(f("r", 2n, "h2"));
      via.proxy.deliver();
      expect(await pending).toBeInstanceOf(StoreUnavailableError);
      expect(await seed.get("k")).toMatchObject({ value: "seed again" });
    } finally {
      await via.close();
    }
  });
});
