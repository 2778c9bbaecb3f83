// A lock that lost its counters hands out a token it already handed out. The stores must then tell
// the two leases apart by their holder ids: the second lease's write is refused and changes nothing,
// while the first lease, still the holder of that token, may write again. Real Redis nodes, a real
// PostgreSQL and a real S3 server; the lock's counters are set back on the nodes themselves.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Redis } from "ioredis";
import pg from "pg";
import { Redlock, resourceKeys, type Lease } from "@fenced/lock";
import { startPostgres, startRedisNodes, startS3, type RedisNodes, type StartedPostgres, type StartedS3 } from "@fenced/servers";
import type { Fence } from "@fenced/fence";
import { StaleTokenError } from "@fenced/store";
import { FencedPostgres } from "@fenced/store/postgres";
import { FencedS3 } from "@fenced/store/s3";

let nodes: RedisNodes;
let clients: Redis[];
let postgres: StartedPostgres;
let pool: pg.Pool;
let s3: StartedS3;

beforeAll(async () => {
  [nodes, postgres, s3] = await Promise.all([startRedisNodes(3), startPostgres(), startS3()]);
  clients = nodes.nodes.map((n) => new Redis({ host: n.host, port: n.port }));
  pool = new pg.Pool({ connectionString: postgres.url, max: 4 });
});

afterAll(async () => {
  clients.forEach((c) => c.disconnect());
  await pool.end();
  await Promise.all([nodes.stop(), postgres.stop(), s3.stop()]);
});

/** What a majority of lock nodes losing their counters does: every node's counter set back to `value`. */
async function setCountersBack(resource: string, value: bigint): Promise<void> {
  await Promise.all(clients.map((c) => c.set(resourceKeys(resource).counter, value.toString())));
}

/**
 * Two leases of one resource that carry the same token, as a lock with lost counters hands them out:
 * the first one's fence, and the second lease.
 */
async function twoLeasesOneToken(redlock: Redlock, resource: string): Promise<[Fence, Lease]> {
  // A few grants first, so that the repeated token is not the first one.
  for (let i = 0; i < 3; i++) await (await redlock.acquire(resource, 10_000)).release();
  const lease = await redlock.acquire(resource, 10_000);
  // Released only so that the lock can grant its token again; its holder goes on writing with its
  // fence. A copy: the released Lease itself would be refused by the stores before any I/O.
  const first: Fence = { resource: lease.resource, token: lease.token, holder: lease.holder };
  await lease.release();
  await setCountersBack(resource, first.token - 1n);
  const second = await redlock.acquire(resource, 10_000);
  // The lock really repeated the token (what the stores must survive), to two different leases.
  expect(second.token).toBe(first.token);
  expect(second.holder).not.toBe(first.holder);
  return [first, second];
}

describe("a token the lock hands out twice", () => {
  it("PostgreSQL: the second lease's write is refused and changes nothing; the first lease writes again", async () => {
    const redlock = new Redlock(clients, { retryCount: 0 });
    const store = new FencedPostgres(pool, { schema: `repeat_${randomBytes(4).toString("hex")}` });
    await store.migrate();
    const resource = `orders/${randomBytes(4).toString("hex")}`;
    const [first, second] = await twoLeasesOneToken(redlock, resource);

    // first wrote before the counters were lost (its write is what second would destroy)
    const written = await store.put("invoice/7", { by: "first" }, { fence: first });
    await expect(store.put("invoice/7", { by: "second" }, { fence: second })).rejects.toBeInstanceOf(StaleTokenError);
    await expect(store.put("invoice/8", { by: "second" }, { fence: second })).rejects.toBeInstanceOf(StaleTokenError);
    await expect(store.register(second)).rejects.toBeInstanceOf(StaleTokenError);
    expect(await store.get("invoice/7")).toMatchObject({ value: { by: "first" }, version: written.version, token: first.token });
    expect(await store.get("invoice/8")).toBeUndefined();

    const again = await store.put("invoice/7", { by: "first, again" }, { fence: first });
    expect(await store.get("invoice/7")).toMatchObject({ value: { by: "first, again" }, version: again.version });
    await second.release();
  });

  it("S3: the second lease's write is refused and changes nothing; the first lease writes again", async () => {
    const redlock = new Redlock(clients, { retryCount: 0 });
    const store = new FencedS3(s3.client(), { bucket: await s3.createBucket() });
    await store.verify();
    const resource = `reports/${randomBytes(4).toString("hex")}`;
    const [first, second] = await twoLeasesOneToken(redlock, resource);

    const written = await store.put("reports/q3.csv", "first", { fence: first });
    await expect(store.put("reports/q3.csv", "second", { fence: second })).rejects.toBeInstanceOf(StaleTokenError);
    // Another key of the resource, which first never wrote: the resource's fence object refuses it.
    await expect(store.put("reports/q4.csv", "second", { fence: second })).rejects.toBeInstanceOf(StaleTokenError);
    await expect(store.register(second)).rejects.toBeInstanceOf(StaleTokenError);
    const read = await store.getBytes("reports/q3.csv");
    expect(read?.body.toString()).toBe("first");
    expect(read?.version).toBe(written.version);
    expect(await store.getBytes("reports/q4.csv")).toBeUndefined();

    await store.put("reports/q3.csv", "first, again", { fence: first });
    expect((await store.getBytes("reports/q3.csv"))?.body.toString()).toBe("first, again");
    await second.release();
    await store.flush();
  });
});
