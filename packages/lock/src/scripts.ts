import { createHash } from "node:crypto";

/**
 * Every Lua script the lock runs, one place. Each runs atomically on one node.
 * KEYS[1] is the lease key, KEYS[2] the resource's fence counter; both carry the same
 * hash tag so that they live in one Redis Cluster slot (see keys.ts).
 *
 * Lua numbers are doubles: a counter goes back as an integer reply only below 2^53, where the
 * double is exact; above that it is read back with GET, so a token survives exactly up to 2^63 - 1.
 */

/**
 * Take the lease if free and, only then, advance the counter. Returns {1, counter} when granted,
 * {0, counter} when another value holds the key (the counter lets the client notice a node that
 * is ahead of the ones that granted). ARGV: value, ttl ms.
 */
export const ACQUIRE = `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local counter = redis.call('INCR', KEYS[2])
  if counter < 9007199254740992 then return {1, counter} end
  return {1, redis.call('GET', KEYS[2])}
end
return {0, redis.call('GET', KEYS[2]) or '0'}
`;

/**
 * Raise the counter to ARGV[2] if it is lower, but only while this node still holds this lease's
 * value (a node that lost the lease must not be counted). Returns 1 if this call moved the counter
 * to exactly ARGV[2], 0 if it was already there or above, -1 if the lease is not held here.
 * Decimal strings without leading zeros compare by length first, then lexically: exact for 64-bit.
 */
export const PUBLISH = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local current = redis.call('GET', KEYS[2]) or '0'
local wanted = ARGV[2]
if string.len(current) < string.len(wanted) or (string.len(current) == string.len(wanted) and current < wanted) then
  redis.call('SET', KEYS[2], wanted)
  return 1
end
return 0
`;

/** Extend only a key that still holds this lease's value. ARGV: value, ttl ms. */
export const EXTEND = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`;

/** Delete only a key that still holds this lease's value; never someone else's lease. ARGV: value. */
export const RELEASE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`;

export interface Script {
  readonly source: string;
  readonly sha: string;
}

function script(source: string): Script {
  return { source, sha: createHash("sha1").update(source).digest("hex") };
}

export const SCRIPTS = {
  acquire: script(ACQUIRE),
  publish: script(PUBLISH),
  extend: script(EXTEND),
  release: script(RELEASE),
} as const;
