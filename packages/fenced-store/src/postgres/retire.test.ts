import { randomBytes } from "node:crypto";
import { Redlock } from "@fenced/lock";
import { startRedisNodes, type RedisNodes } from "@fenced/servers";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError } from "../errors.js";
import type { Fence } from "../fence.js";
import type { FencedPostgres } from "./store.js";
import { outcome, pgHarness, type PgHarness } from "./test-support.js";

// The recipe of the README ("What storage costs": a resource a hand-built fence poisoned), step by
// step, on a real PostgreSQL with leases from a real Redlock.

let h: PgHarness;
let redis: RedisNodes;
let client: Redis;
let redlock: Redlock;
beforeAll(async () => {
  [h, redis] = await Promise.all([pgHarness(), startRedisNodes(1)]);
  const node = redis.nodes[0];
  if (node === undefined) throw new Error("one Redis node");
  client = new Redis({ host: node.host, port: node.port });
  redlock = new Redlock([client], { retryCount: 5, nodeTimeoutMs: 2_000 });
});
afterAll(async () => {
  client.disconnect();
  await Promise.all([h.close(), redis.stop()]);
});

/** The keys a resource owns, tombstones included: a read of the documented layout (PROTOCOL.md, "Layout"). */
async function ownedBy(store: FencedPostgres, resource: string): Promise<string[]> {
  const { rows } = await h.pool.query<{ key: string }>(`SELECT key FROM "${store.schema}".records WHERE resource = $1 ORDER BY key`, [
    resource,
  ]);
  return rows.map((r) => r.key);
}

describe("FencedPostgres: retiring a resource a hand-built fence poisoned", () => {
  for (const intruder of [undefined, "intruder"]) {
    it(`moves its keys to a new resource under the stored fence replayed (poison ${intruder === undefined ? "without" : "with"} a holder)`, async () => {
      const store = await h.store("retire");
      const orders = `orders/${randomBytes(4).toString("hex")}`;
      const before = await redlock.acquire(orders, 30_000);
      await store.put("orders/41", { total: 41 }, { fence: before });
      await store.put("orders/gone", { total: 0 }, { fence: before });
      await store.delete("orders/gone", { fence: before });
      await before.release();
      const poison: Fence =
        intruder === undefined ? { resource: orders, token: 2n ** 62n } : { resource: orders, token: 2n ** 62n, holder: intruder };
      await store.put("orders/42", { total: 42 }, { fence: poison });

      // Every lease the lock hands out for the resource is refused now, transfer()'s `from` included:
      // only a token at or above 2^62 passes its ratchet.
      const real = await redlock.acquire(orders, 30_000);
      const retired = `${orders}.v2`;
      const elsewhere = await redlock.acquire(retired, 30_000);
      expect(await outcome(store.transfer("orders/41", { from: real, to: elsewhere }))).toBeInstanceOf(StaleTokenError);
      await real.release();
      // Equal to the stored token from another holder is refused too: the replay must be exact.
      const wrongHolder = { resource: orders, token: 2n ** 62n, holder: "somebody-else" };
      expect(await outcome(store.transfer("orders/41", { from: wrongHolder, to: elsewhere }))).toBeInstanceOf(StaleTokenError);
      expect(await ownedBy(store, orders)).toEqual(["orders/41", "orders/42", "orders/gone"]);

      // The recipe: read the stored fence, replay it as `from`, move every key to the new resource.
      const stuck = await store.fence(orders);
      if (stuck === undefined) throw new Error("the poisoned resource has a fence row");
      expect(stuck).toEqual({ resource: orders, token: 2n ** 62n, holder: intruder ?? null });
      const from = { resource: stuck.resource, token: stuck.token, holder: stuck.holder ?? undefined };
      for (const key of await ownedBy(store, orders)) await store.transfer(key, { from, to: elsewhere });

      expect(await ownedBy(store, orders)).toEqual([]);
      expect(await ownedBy(store, retired)).toEqual(["orders/41", "orders/42", "orders/gone"]);
      expect(await store.get("orders/41")).toMatchObject({ value: { total: 41 }, resource: retired, token: elsewhere.token });
      expect(await store.get("orders/gone")).toBeUndefined();
      // The new resource's leases write on; the old name keeps its poisoned row (replaying it raised nothing).
      await store.put("orders/42", { total: 43 }, { fence: elsewhere });
      await store.put("orders/gone", { total: 1 }, { fence: elsewhere });
      expect(await store.fence(retired)).toEqual({ resource: retired, token: elsewhere.token, holder: elsewhere.holder });
      expect(await store.fence(orders)).toEqual(stuck);
      // And the new resource's ratchet works as any: the next lease shuts the one before it out.
      await elsewhere.release();
      const next = await redlock.acquire(retired, 30_000);
      await store.put("orders/42", { total: 44 }, { fence: next });
      const late = { resource: retired, token: elsewhere.token, holder: elsewhere.holder };
      expect(await outcome(store.put("orders/42", { total: 0 }, { fence: late }))).toBeInstanceOf(StaleTokenError);
      await next.release();
    });
  }
});
