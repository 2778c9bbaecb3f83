// The physical floor of a Redlock acquire+release over the same nodes: a bare SET NX PX on every
// node and a compare-and-delete on every node, each resolved as soon as a quorum answered. Nothing
// else: no token, no retries, no validity computation, no error reporting. Any Redlock pays at
// least this; what an implementation costs above it is its own overhead.
//
// Two variants split what @fenced/lock's acquire adds to it on a node, for information: "script", the
// same SET NX PX run inside a Lua script (what running a script costs), and "script + INCR", that SET
// followed by an INCR of a counter key in the same script — the steady state of ACQUIRE, one write
// more, which Redis propagates and appends to its AOF as MULTI, SET, INCR, EXEC.
import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";

const COMPARE_AND_DELETE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;
const SET_IN_SCRIPT = `return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`;
const SET_AND_INCR = `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end return false`;

/** How the floor takes a key on a node: a bare SET, that SET in a script, or the SET and an INCR in a script. */
export type FloorVariant = "set" | "script" | "script + INCR";

interface FloorCommands {
  floorRelease(key: string, value: string): Promise<unknown>;
  floorSet(key: string, value: string, ttlMs: number): Promise<unknown>;
  floorSetIncr(key: string, counter: string, value: string, ttlMs: number): Promise<unknown>;
}

export interface FloorLock {
  acquire(key: string, ttlMs: number): Promise<string>;
  release(key: string, value: string): Promise<void>;
}

export function floorLock(clients: readonly Redis[], variant: FloorVariant = "set"): FloorLock {
  const quorum = Math.floor(clients.length / 2) + 1;
  for (const c of clients) {
    c.defineCommand("floorRelease", { numberOfKeys: 1, lua: COMPARE_AND_DELETE });
    c.defineCommand("floorSet", { numberOfKeys: 1, lua: SET_IN_SCRIPT });
    c.defineCommand("floorSetIncr", { numberOfKeys: 2, lua: SET_AND_INCR });
  }
  const commands = clients as readonly (Redis & FloorCommands)[];
  const take = (c: Redis & FloorCommands, key: string, value: string, ttlMs: number): Promise<unknown> => {
    if (variant === "set") return c.set(key, value, "PX", ttlMs, "NX");
    if (variant === "script") return c.floorSet(key, value, ttlMs);
    return c.floorSetIncr(key, `${key}:counter`, value, ttlMs);
  };
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
        commands.map((c) => take(c, key, value, ttlMs)),
        (r) => r === "OK" || typeof r === "number",
      );
      if (granted < quorum) throw new Error(`floor: ${key} not granted`);
      return value;
    },
    async release(key, value) {
      await atQuorum(
        commands.map((c) => c.floorRelease(key, value)),
        () => true,
      );
    },
  };
}
