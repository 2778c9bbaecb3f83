// The physical floor of a Redlock acquire+release over the same nodes: a bare SET NX PX on every
// node and a compare-and-delete on every node, each resolved as soon as a quorum answered. Nothing
// else: no token, no retries, no validity computation, no error reporting. Any Redlock pays at
// least this; what an implementation costs above it is its own overhead.
import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";

const COMPARE_AND_DELETE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;

export interface FloorLock {
  acquire(key: string, ttlMs: number): Promise<string>;
  release(key: string, value: string): Promise<void>;
}

export function floorLock(clients: readonly Redis[]): FloorLock {
  const quorum = Math.floor(clients.length / 2) + 1;
  for (const c of clients) c.defineCommand("floorRelease", { numberOfKeys: 1, lua: COMPARE_AND_DELETE });
  /** Resolves with how many of `sends` answered `ok`, as soon as `quorum` did, or when all have answered. */
  const atQuorum = (sends: Promise<unknown>[], ok: (reply: unknown) => boolean): Promise<number> =>
    new Promise((resolve) => {
      let yes = 0;
      let answered = 0;
      for (const s of sends) {
        s.then(
          (reply) => {
            answered++;
            if (ok(reply) && ++yes === quorum) resolve(yes);
            else if (answered === sends.length) resolve(yes);
          },
          () => {
            if (++answered === sends.length) resolve(yes);
          },
        );
      }
    });
  return {
    async acquire(key, ttlMs) {
      const value = randomBytes(16).toString("hex");
      const granted = await atQuorum(
        clients.map((c) => c.set(key, value, "PX", ttlMs, "NX")),
        (r) => r === "OK",
      );
      if (granted < quorum) throw new Error(`floor: ${key} not granted`);
      return value;
    },
    async release(key, value) {
      await atQuorum(
        clients.map((c) => (c as Redis & { floorRelease(key: string, value: string): Promise<unknown> }).floorRelease(key, value)),
        () => true,
      );
    },
  };
}
