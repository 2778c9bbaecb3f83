import { readdir, readFile } from "node:fs/promises";
import { Cluster as Cluster5, Redis as Redis5 } from "ioredis";
import { Cluster as Cluster6, Redis as Redis6 } from "ioredis-6";
import {
  createClient as createNodeRedis5,
  createClientPool as createNodeRedisPool5,
  createCluster as createNodeRedisCluster5,
} from "redis";
import {
  createClient as createNodeRedis6,
  createClientPool as createNodeRedisPool6,
  createCluster as createNodeRedisCluster6,
} from "redis-6";
import { InvalidArgumentError } from "@fenced/fence";
import { GlideClient, GlideClusterClient } from "@valkey/valkey-glide";
import { describe, expect, expectTypeOf, it } from "vitest";
import type { RedisClient } from "./client.js";
import { fromNodeRedis, type NodeRedisClient } from "./node-redis.js";
import { fromValkeyGlide, type ValkeyGlideClient } from "./valkey-glide.js";
import { Redlock } from "./redlock.js";

/**
 * ioredis is a peer dependency (5 or 6): the lock types its clients structurally. This file is
 * checked by `pnpm typecheck` under the repository's strict settings (exactOptionalPropertyTypes
 * included); a client type that stopped fitting fails there, not at run time.
 */
describe("Redis clients of both ioredis majors", () => {
  it("type-check as lock clients, and a Redlock takes a mix of them", () => {
    expectTypeOf<Redis5>().toExtend<RedisClient>();
    expectTypeOf<Cluster5>().toExtend<RedisClient>();
    expectTypeOf<Redis6>().toExtend<RedisClient>();
    expectTypeOf<Redis6<"legacy">>().toExtend<RedisClient>();
    expectTypeOf<Cluster6>().toExtend<RedisClient>();
    expectTypeOf<{ evalsha(): Promise<unknown> }>().not.toExtend<RedisClient>();

    // lazyConnect: constructed but never connected (nothing listens on these ports).
    const clients = [
      new Redis5({ port: 1, lazyConnect: true }),
      new Redis6({ port: 1, lazyConnect: true }),
      new Cluster5([{ port: 1 }], { lazyConnect: true }),
      new Cluster6([{ port: 1 }], { lazyConnect: true }),
    ] as const;
    try {
      const redlock = new Redlock([...clients]);
      expect(redlock.quorum).toBe(3);
      expect(new Redlock([clients[0]]).clients).toEqual([clients[0]]);
      expect(new Redlock([clients[1]]).clients).toEqual([clients[1]]);
      expect(new Redlock([clients[2], clients[3]]).quorum).toBe(2);
    } finally {
      for (const client of clients) client.disconnect();
    }
  });

  it("node-redis 5 and 6 clients type-check for fromNodeRedis, whose node a Redlock takes, one per client; a cluster client, a pool or another object is refused", () => {
    // Never connected: the adapter sends nothing when it is made.
    const nodes = [createNodeRedis5({ url: "redis://127.0.0.1:1" }), createNodeRedis6({ url: "redis://127.0.0.1:1", RESP: 3 })] as const;
    expectTypeOf(nodes[0]).toExtend<NodeRedisClient>();
    expectTypeOf(nodes[1]).toExtend<NodeRedisClient>();
    expectTypeOf(createNodeRedis6({ RESP: 2 })).toExtend<NodeRedisClient>();
    expectTypeOf<Redis5>().not.toExtend<NodeRedisClient>();
    expect(new Redlock(nodes.map(fromNodeRedis)).quorum).toBe(2);
    expect(nodes.map((n) => fromNodeRedis(n).status)).toEqual(["end", "end"]);
    const clusters = [
      createNodeRedisCluster5({ rootNodes: [{ url: "redis://127.0.0.1:1" }] }),
      createNodeRedisCluster6({ rootNodes: [{ url: "redis://127.0.0.1:1" }] }),
    ];
    for (const cluster of clusters) expect(() => fromNodeRedis(cluster as never)).toThrow(InvalidArgumentError);
    // A pool spreads commands over several connections: a RELEASE could overtake its ACQUIRE.
    const pools = [createNodeRedisPool5({ url: "redis://127.0.0.1:1" }), createNodeRedisPool6({ url: "redis://127.0.0.1:1" })];
    for (const pool of pools) expect(() => fromNodeRedis(pool as never)).toThrow(InvalidArgumentError);
    // One node per client: its watch listens to the client once, however often it is adapted.
    expect(fromNodeRedis(nodes[0])).toBe(fromNodeRedis(nodes[0]));
    expect(() => fromNodeRedis(new Redis5({ port: 1, lazyConnect: true }) as never)).toThrow(InvalidArgumentError);
  });

  it("a GLIDE client type-checks for fromValkeyGlide; a GLIDE cluster client or another object is refused", () => {
    expectTypeOf<GlideClient>().toExtend<ValkeyGlideClient>();
    expectTypeOf<Redis5>().not.toExtend<ValkeyGlideClient>();
    // GLIDE connects as it makes a client: the class's own methods, on an object that never connected.
    const glide = Object.create(GlideClient.prototype) as GlideClient;
    expect(new Redlock([fromValkeyGlide(glide)]).quorum).toBe(1);
    expect(() => fromValkeyGlide(Object.create(GlideClusterClient.prototype) as GlideClusterClient)).toThrow(InvalidArgumentError);
    expect(() => fromValkeyGlide(new Redis5({ port: 1, lazyConnect: true }) as never)).toThrow(InvalidArgumentError);
  });

  it("the published declarations cannot import ioredis, iovalkey, redis or GLIDE: no module in the build imports any", async () => {
    // tsconfig.build.json builds src/ without tests and test support; a .d.ts imports only what its module imports.
    const dir = new URL(".", import.meta.url);
    const built = (await readdir(dir)).filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts") && !f.endsWith("test-support.ts"));
    expect(built).toContain("redlock.ts");
    for (const file of built) {
      const source = await readFile(new URL(file, dir), "utf8");
      expect(source, file).not.toMatch(/from\s+["'](ioredis|iovalkey|redis|@redis\/|@valkey\/)/);
      expect(source, file).not.toMatch(/import\(\s*["'](ioredis|iovalkey|redis|@redis\/|@valkey\/)/);
    }
  });
});
