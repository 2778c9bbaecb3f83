import { readdir, readFile } from "node:fs/promises";
import { Cluster as Cluster5, Redis as Redis5 } from "ioredis";
import { Cluster as Cluster6, Redis as Redis6 } from "ioredis-6";
import { describe, expect, expectTypeOf, it } from "vitest";
import type { RedisClient } from "./client.js";
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

  it("the published declarations cannot import ioredis or iovalkey: no module in the build imports either", async () => {
    // tsconfig.build.json builds src/ without tests and test support; a .d.ts imports only what its module imports.
    const dir = new URL(".", import.meta.url);
    const built = (await readdir(dir)).filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts") && !f.endsWith("test-support.ts"));
    expect(built).toContain("redlock.ts");
    for (const file of built) {
      const source = await readFile(new URL(file, dir), "utf8");
      expect(source, file).not.toMatch(/from\s+["'](ioredis|iovalkey)/);
      expect(source, file).not.toMatch(/import\(\s*["'](ioredis|iovalkey)/);
    }
  });
});
