import { randomBytes } from "node:crypto";
import { InvalidArgumentError } from "@fenced/fence";
import { Redlock } from "@fenced/lock";
import { startRedisNodes, type RedisNodes } from "@fenced/servers";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError, StoreSetupError, StoreUnavailableError } from "../errors.js";
import type { Fence } from "../fence.js";
import { FencedPostgres } from "./store.js";
import { gate, outcome, pgHarness, type PgHarness } from "./test-support.js";

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

/** A resource name of its own: REDIS_URLS may point at nodes other runs use too. */
const fresh = (label: string): string => `${label}/${randomBytes(4).toString("hex")}`;
const f = (resource: string, token: bigint, holder?: string): Fence =>
  holder === undefined ? { resource, token } : { resource, token, holder };
/** What a hand-built fence can claim, and no lock's counter will reach. */
const POISON = 2n ** 62n;

describe("FencedPostgres.fence(): the resource's fence row, as the ratchet compares against it", () => {
  it("is undefined before any write or registration of the resource, whatever other resources did", async () => {
    const store = await h.store("fence_none");
    expect(await store.fence("orders")).toBeUndefined();
    await store.put("k", 1, { fence: f("other", 5n, "h") });
    expect(await store.fence("orders")).toBeUndefined();
    expect(await store.fence("other")).toEqual({ resource: "other", token: 5n, holder: "h" });
  });

  it("after register(): its token and holder; a fence without a holder reads holder null", async () => {
    const store = await h.store("fence_register");
    await store.register(f("orders", 7n, "lease-a"));
    expect(await store.fence("orders")).toEqual({ resource: "orders", token: 7n, holder: "lease-a" });
    await store.register(f("orders", 8n));
    expect(await store.fence("orders")).toEqual({ resource: "orders", token: 8n, holder: null });
    expect(await store.fence("orders")).toEqual(await h.fenceRow(store, "orders").then((row) => ({ resource: "orders", ...row })));
  });

  it("after puts: the highest token admitted and its holder; a refused write leaves it, and its error says the same", async () => {
    const store = await h.store("fence_puts");
    await store.put("a", 1, { fence: f("orders", 3n, "h3") });
    const b = await store.put("b", 2, { fence: f("orders", 9n, "h9") });
    await store.put("a", 3, { fence: f("orders", 9n, "h9"), ifVersion: (await store.get("a"))?.version ?? "" });
    expect(await store.fence("orders")).toEqual({ resource: "orders", token: 9n, holder: "h9" });
    const refused = await outcome(store.put("b", 4, { fence: f("orders", 5n, "h5"), ifVersion: b.version }));
    expect(refused).toBeInstanceOf(StaleTokenError);
    const shown = await store.fence("orders");
    expect(shown).toEqual({ resource: "orders", token: 9n, holder: "h9" });
    expect(refused).toMatchObject({ highest: shown?.token, highestHolder: shown?.holder });
    // transfer() raises both resources' rows; delete and transaction() raise their resource's.
    await store.transfer("a", { from: f("orders", 10n, "h10"), to: f("archive", 2n) });
    await store.delete("a", { fence: f("archive", 4n, "h4") });
    await store.transaction(f("orders", 11n, "h11"), () => Promise.resolve());
    expect(await store.fence("orders")).toEqual({ resource: "orders", token: 11n, holder: "h11" });
    expect(await store.fence("archive")).toEqual({ resource: "archive", token: 4n, holder: "h4" });
  });

  it("a hand-built fence at 2^62: every real lease of the resource is refused, register included, and fence() shows why", async () => {
    const store = await h.store("fence_poison");
    const resource = fresh("orders");
    const first = await redlock.acquire(resource, 30_000);
    const written = await store.put("orders/1", { total: 1 }, { fence: first });
    await first.release();
    // Library users build fences by hand; nothing but the ratchet judges them.
    await store.register({ resource, token: POISON });
    const poisoned = { resource, token: POISON, holder: null };
    for (let round = 0; round < 2; round++) {
      const lease = await redlock.acquire(resource, 30_000);
      expect(lease.token).toBeGreaterThan(first.token);
      const writes = [
        () => store.register(lease),
        () => store.put("orders/1", { total: 2 }, { fence: lease }),
        () => store.put("orders/1", { total: 2 }, { fence: lease, ifVersion: written.version }),
        () => store.put("orders/2", { total: 2 }, { fence: lease }),
        () => store.delete("orders/1", { fence: lease }),
        () => store.transaction(lease, () => Promise.resolve()),
      ];
      for (const [i, write] of writes.entries()) {
        const err = await outcome(write());
        expect(err, `round ${round}, write #${i}`).toBeInstanceOf(StaleTokenError);
        expect(err, `round ${round}, write #${i}`).toMatchObject({ token: lease.token, highest: POISON, highestHolder: null });
      }
      await lease.release();
      expect(await store.fence(resource)).toEqual(poisoned);
    }
    expect(await store.get("orders/1")).toMatchObject({ value: { total: 1 }, version: written.version });
  });

  it("reads what is committed without waiting: a writer holding the fence row does not block it, its raise shows once committed", async () => {
    const store = await h.store("fence_inflight");
    await store.register(f("orders", 3n, "h3"));
    const inside = gate();
    const finish = gate();
    const tx = store.transaction(f("orders", 4n, "h4"), async () => {
      inside.open();
      await finish.opened;
    });
    await inside.opened;
    expect(await store.fence("orders")).toEqual({ resource: "orders", token: 3n, holder: "h3" });
    finish.open();
    await tx;
    expect(await store.fence("orders")).toEqual({ resource: "orders", token: 4n, holder: "h4" });
  });

  it("bad input is InvalidArgumentError, and an aborted signal throws its reason, before any I/O", async () => {
    let io = 0;
    const trap = {
      query: () => ((io += 1), Promise.reject(new Error("I/O"))),
      connect: () => ((io += 1), Promise.reject(new Error("I/O"))),
    };
    const store = new FencedPostgres(trap, { schema: "unused" });
    for (const resource of ["", 5, null, undefined, {}, "a\u0000b", "x".repeat(513), "a\uD800"])
      await expect(store.fence(resource as string)).rejects.toBeInstanceOf(InvalidArgumentError);
    for (const options of [null, 5, "x", { signal: {} }, { signal: { aborted: "yes" } }])
      await expect(store.fence("orders", options as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    const controller = new AbortController();
    const reason = new Error("lease lost");
    controller.abort(reason);
    expect(await outcome(store.fence("orders", { signal: controller.signal }))).toBe(reason);
    expect(io).toBe(0);
  });

  it("before migrate(): StoreSetupError not-migrated", async () => {
    const store = new FencedPostgres(h.pool, { schema: `t_never_migrated_${randomBytes(4).toString("hex")}` });
    const err = await outcome(store.fence("orders"));
    expect(err).toBeInstanceOf(StoreSetupError);
    expect(err).toMatchObject({ backend: "postgres", problem: "not-migrated" });
  });

  it("has the store's deadline: with no client free in the pool it fails with StoreUnavailableError timeout", async () => {
    const store = await h.store("fence_deadline");
    const pool = new pg.Pool({ connectionString: h.url, max: 1 });
    const held = await pool.connect();
    try {
      const bounded = new FencedPostgres(pool, { schema: store.schema, timeoutMs: 200 });
      const start = performance.now();
      const err = await outcome(bounded.fence("orders"));
      expect(err).toBeInstanceOf(StoreUnavailableError);
      expect(err).toMatchObject({ backend: "postgres", reason: "timeout", operation: "fence" });
      expect(performance.now() - start).toBeLessThan(2_000);
    } finally {
      held.release();
      await pool.end();
    }
  });
});
