// using() whose lease is lost while its routine writes: the routine's next write is refused by the
// store before anything is sent (that call's `applied` is "no"), and the routine passes that error on.
// using() must not answer "no" for the routine: work ran under the lease (a write landed), so it
// answers with the lease's own error, `applied: "unknown"`. Real Redis nodes and a real PostgreSQL;
// the lease is lost as a majority losing its key loses it.
import { once } from "node:events";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Redis } from "ioredis";
import pg from "pg";
import { LeaseLostError, Redlock, resourceKeys } from "@fenced/lock";
import { startPostgres, startRedisNodes, type RedisNodes, type StartedPostgres } from "@fenced/servers";
import { FencedPostgres } from "@fenced/store/postgres";

let nodes: RedisNodes;
let clients: Redis[];
let postgres: StartedPostgres;
let pool: pg.Pool;

beforeAll(async () => {
  [nodes, postgres] = await Promise.all([startRedisNodes(3), startPostgres()]);
  clients = nodes.nodes.map((n) => new Redis({ host: n.host, port: n.port }));
  pool = new pg.Pool({ connectionString: postgres.url, max: 2 });
});

afterAll(async () => {
  clients.forEach((c) => c.disconnect());
  await pool.end();
  await Promise.all([nodes.stop(), postgres.stop()]);
});

describe("using(): a routine whose write is refused because its lease was lost", () => {
  it("rejects with the lease's LeaseLostError, applied unknown, not the refused call's applied no", async () => {
    const store = new FencedPostgres(pool, { schema: "using_lost" });
    await store.migrate();
    const redlock = new Redlock(clients, { retryCount: 0 });
    let refused: unknown;
    const outcome = redlock.using("using-lost", 1_000, async (lease) => {
      await store.put("k", "written under the lease", { fence: lease });
      // Every node forgets the lease: using()'s next extension finds it held by no majority.
      await Promise.all(clients.map((c) => c.del(resourceKeys("using-lost").lease)));
      if (!lease.signal.aborted) await once(lease.signal, "abort");
      try {
        await store.put("k", "after the lease was lost", { fence: lease });
      } catch (err) {
        refused = err;
        throw err;
      }
    });
    const error = await outcome.then(
      () => undefined,
      (err: unknown) => err,
    );
    // The store's answer to the one call: refused before sending.
    expect(refused).toMatchObject({ code: "LEASE_LOST", applied: "no" });
    // using()'s answer for the routine: work ran under the lease.
    expect(error).toBeInstanceOf(LeaseLostError);
    expect(error).toMatchObject({ code: "LEASE_LOST", applied: "unknown", resource: "using-lost" });
    expect((await store.get("k"))?.value).toBe("written under the lease");
  });

  it("a routine's own error, not the lease's, is passed on as it is even after the lease was lost", async () => {
    const redlock = new Redlock(clients, { retryCount: 0 });
    const own = new TypeError("the routine's own");
    const outcome = redlock.using("using-own", 1_000, async (lease) => {
      await Promise.all(clients.map((c) => c.del(resourceKeys("using-own").lease)));
      if (!lease.signal.aborted) await once(lease.signal, "abort");
      throw own;
    });
    await expect(outcome).rejects.toBe(own);
  });

  it("an error of the routine's own that names the loss as its cause is passed on as it is too", async () => {
    const redlock = new Redlock(clients, { retryCount: 0 });
    let own: Error | undefined;
    const outcome = redlock.using("using-cause", 1_000, async (lease) => {
      await Promise.all(clients.map((c) => c.del(resourceKeys("using-cause").lease)));
      if (!lease.signal.aborted) await once(lease.signal, "abort");
      own = new Error("the job failed", { cause: lease.signal.reason });
      throw own;
    });
    await expect(outcome).rejects.toSatisfy((err) => err === own);
  });

  it("a routine that returns a plain value (a JavaScript caller's): its value", async () => {
    const redlock = new Redlock(clients, { retryCount: 0 });
    const routine = (() => 42) as unknown as () => Promise<number>;
    await expect(redlock.using("using-plain", 1_000, routine)).resolves.toBe(42);
  });
});
