import { createHash } from "node:crypto";
import { MAX_TOKEN } from "@fenced/fence";

/**
 * Every Lua script the lock runs, one place. Each runs atomically on one node.
 * KEYS[1] is the lease key, KEYS[2] the resource's fence counter; both carry the same
 * hash tag so that they live in one Redis Cluster slot (see keys.ts).
 *
 * A counter goes back as an integer reply only below INTEGER_REPLY_LIMIT; above it, it is read back
 * with GET as a decimal string, so a token survives exactly up to 2^63 - 1.
 */

/**
 * 2^52. Lua numbers are doubles, exact below 2^53, but a client may not be: ioredis 6's RESP3 decoder
 * accumulates an integer reply as `n * 10 + byte - 48` in a double, whose intermediate passes 2^53
 * for values within 48 of it, so odd values there come back as a neighbouring even one (two leases
 * with one token). A factor of two below 2^53 leaves any such accumulation exact.
 */
export const INTEGER_REPLY_LIMIT = 2 ** 52;

/**
 * A counter must stay a token: an integer in 0..2^63 - 1 (MAX_TOKEN in @fenced/fence), which is also
 * where INCR stops. Lua has no 64-bit integers, so counters are compared as decimal strings: without
 * leading zeros, a longer string is a larger number, and strings of equal length compare lexically.
 */
const CEILING = MAX_TOKEN.toString();
/** Lua conditions on the string `s`: a decimal integer in its one spelling; compared with the ceiling. */
const IS_DECIMAL = `(s == '0' or string.match(s, '^[1-9]%d*$') ~= nil)`;
const compare = (op: ">" | ">="): string =>
  `(string.len(s) > ${CEILING.length} or (string.len(s) == ${CEILING.length} and s ${op} '${CEILING}'))`;

/**
 * Take the lease if free and, only then, advance the counter. Returns {1, counter} when granted,
 * {0, counter} when not (the counter lets the client notice a node that is ahead of the ones that
 * granted). ARGV: value, ttl ms.
 *
 * The steady state is two commands, SET NX and INCR. INCR succeeds exactly when the counter is
 * absent or an integer in its one decimal spelling below 2^63 - 1 (Redis parses it strictly: no
 * leading zeros, sign or spaces, and refuses to overflow); when it fails, or finds a negative
 * counter, this call's writes are undone before it answers: the lease key deleted (SET NX created
 * it, so nothing else held it) and a negative counter decremented back. So whatever the counter
 * holds, the script leaves nothing behind when it does not grant: a counter at or past the ceiling
 * (2^63 - 1) is a refusal, {0, counter}, which the client reads as an exhausted resource; one that
 * is not a decimal integer is an error. Redis lets a script that has written keep writing even
 * under maxmemory, so the undo cannot itself be refused.
 */
export const ACQUIRE = `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local counter = redis.pcall('INCR', KEYS[2])
  if type(counter) == 'number' and counter >= 1 then
    if counter < ${INTEGER_REPLY_LIMIT} then return {1, counter} end
    return {1, redis.call('GET', KEYS[2])}
  end
  redis.call('DEL', KEYS[1])
  if type(counter) == 'number' then redis.call('DECR', KEYS[2]) end
end
local s = redis.pcall('GET', KEYS[2]) or '0'
if type(s) ~= 'string' or not ${IS_DECIMAL} then return redis.error_reply('ERR fence counter is not a decimal integer') end
return {0, s}
`;

/**
 * Raise the counter to ARGV[2] if it is lower, but only while this node still holds this lease's
 * value (a node that lost the lease must not be counted). Returns 1 if this call moved the counter
 * to exactly ARGV[2], 0 if it was already there or above, -1 if the lease is not held here.
 * ARGV[2] must be a token (at most 2^63 - 1): anything else is an error, and nothing is written.
 */
export const PUBLISH = `
local s = ARGV[2]
if not ${IS_DECIMAL} or ${compare(">")} then return redis.error_reply('ERR publish wants a token in 0..${CEILING}') end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local current = redis.call('GET', KEYS[2]) or '0'
if string.len(current) < string.len(s) or (string.len(current) == string.len(s) and current < s) then
  redis.call('SET', KEYS[2], s)
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
