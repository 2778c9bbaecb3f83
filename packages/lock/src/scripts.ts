import { createHash } from "node:crypto";
import { MAX_TOKEN } from "@fenced/fence";

/**
 * Every Lua script the lock runs, one place. Each runs atomically on one node.
 *
 * A lease holds one resource or several (a set, given in the caller's order). Every script takes the
 * set's keys in that order: ACQUIRE and PUBLISH the pairs KEYS[2i-1] = resource i's lease key,
 * KEYS[2i] = its fence counter; EXTEND and RELEASE the lease keys only. A resource's two keys carry
 * the same hash tag, so that they live in one Redis Cluster slot (see keys.ts); a set's keys share one
 * slot only when its resources share a hash tag (Redlock refuses a set that does not, on a Cluster).
 * One lease value, the lease's secret, is stored under every lease key of the set.
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
 * Take every lease key of the set if all are free and, only then, advance every counter. Returns
 * {1, counter_1, …, counter_n} when granted, {0, counter_1, …, counter_n} when not (the counters let
 * the client notice a node that is ahead of the ones that granted). ARGV: value, ttl ms.
 *
 * All or nothing on the node: the lease keys are taken one by one with SET NX; the first that is
 * held undoes the ones this call took (it created them, so nothing else held them) and refuses. No
 * other client can see a partial hold: the script is atomic. The steady state of a lease of one
 * resource is two commands, SET NX and INCR, as before sets existed.
 *
 * INCR succeeds exactly when the counter is absent or an integer in its one decimal spelling below
 * 2^63 - 1 (Redis parses it strictly: no leading zeros, sign or spaces, and refuses to overflow);
 * when it fails, or finds a negative counter, for any resource of the set, this call's writes are
 * undone before it answers: every lease key it took deleted, every counter it advanced decremented
 * back — deleted when its INCR returned 1, so that a counter this call created is not left behind
 * as "0" (absent and "0" read alike) — and a negative one decremented back too. A counter it moved and moved back was seen by no one (atomic), and
 * the refusal makes no client count it, so each value a counter ever shows is still shown once
 * (PROTOCOL.md, "Sets"). So whatever the counters hold, the script leaves nothing behind when it does
 * not grant: a counter at or past the ceiling (2^63 - 1) is a refusal, which the client reads as an
 * exhausted resource; one that is not a decimal integer is an error. Redis lets a script that has
 * written keep writing even under maxmemory, so the undo cannot itself be refused.
 */
const ACQUIRE = `
local taken = 0
for i = 1, #KEYS, 2 do
  if not redis.call('SET', KEYS[i], ARGV[1], 'NX', 'PX', ARGV[2]) then break end
  taken = i
end
if taken == #KEYS - 1 then
  local reply = {1}
  for i = 2, #KEYS, 2 do
    local counter = redis.pcall('INCR', KEYS[i])
    if type(counter) == 'number' and counter >= 1 then
      if counter < ${INTEGER_REPLY_LIMIT} then reply[#reply + 1] = counter else reply[#reply + 1] = redis.call('GET', KEYS[i]) end
    else
      if type(counter) == 'number' then redis.call('DECR', KEYS[i]) end
      for j = 2, i - 2, 2 do
        if reply[j / 2 + 1] == 1 then redis.call('DEL', KEYS[j]) else redis.call('DECR', KEYS[j]) end
      end
      reply = nil
      break
    end
  end
  if reply then return reply end
end
for i = 1, taken, 2 do redis.call('DEL', KEYS[i]) end
local reply = {0}
for i = 2, #KEYS, 2 do
  local s = redis.pcall('GET', KEYS[i]) or '0'
  if type(s) ~= 'string' or not ${IS_DECIMAL} then return redis.error_reply('ERR fence counter is not a decimal integer') end
  reply[#reply + 1] = s
end
return reply
`;

/**
 * For each resource of the set, raise its counter to ARGV[i + 1] if it is lower, but only while this
 * node still holds this lease's value under that resource's lease key (a node that lost the lease
 * must not be counted). Returns one answer per resource: 1 if this call moved the counter to exactly
 * ARGV[i + 1], 0 if it was already there or above, -1 if the lease is not held here. Every ARGV[i + 1]
 * must be a token (at most 2^63 - 1): anything else is an error, and nothing is written.
 */
const PUBLISH = `
for i = 2, #ARGV do
  local s = ARGV[i]
  if not ${IS_DECIMAL} or ${compare(">")} then return redis.error_reply('ERR publish wants a token in 0..${CEILING}') end
end
local reply = {}
for i = 2, #ARGV do
  local s = ARGV[i]
  local answer = 0
  if redis.call('GET', KEYS[2 * i - 3]) ~= ARGV[1] then
    answer = -1
  else
    local current = redis.call('GET', KEYS[2 * i - 2]) or '0'
    if string.len(current) < string.len(s) or (string.len(current) == string.len(s) and current < s) then
      redis.call('SET', KEYS[2 * i - 2], s)
      answer = 1
    end
  end
  reply[#reply + 1] = answer
end
return reply
`;

/**
 * Extend the set only where every lease key still holds this lease's value, all of them or none
 * (a node that holds part of a set does not hold the lease). ARGV: value, ttl ms. Returns 1 or 0.
 */
const EXTEND = `
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then return 0 end
end
for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return 1
`;

/**
 * Delete every lease key of the set that still holds this lease's value; never someone else's lease.
 * ARGV: value. Returns how many it deleted.
 */
const RELEASE = `
local deleted = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then deleted = deleted + redis.call('DEL', KEYS[i]) end
end
return deleted
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
