// Shared by the tests of leases of several resources (not part of the published build: see tsconfig.build.json).
import type { Redis } from "ioredis";
import { resourceKeys } from "./keys.js";
import { SCRIPTS } from "./scripts.js";
import type { LockClient } from "./test-support.js";

/** Reads every given key in one script, so that a node is seen at one instant: null where a key is absent. */
const READ_KEYS = `
local out = {}
for i = 1, #KEYS do out[i] = redis.call('GET', KEYS[i]) or false end
return out
`;

/** The values of the resources' lease keys on one node, read atomically (in the resources' order; null where absent). */
export async function leaseKeysAt(redis: Redis, resources: readonly string[]): Promise<(string | null)[]> {
  const keys = resources.map((r) => resourceKeys(r).lease);
  return (await redis.eval(READ_KEYS, keys.length, ...keys)) as (string | null)[];
}

/** leaseKeysAt on every node: by node, then by resource. */
export function leaseKeysOn(admin: readonly Redis[], resources: readonly string[]): Promise<(string | null)[][]> {
  return Promise.all(admin.map((redis) => leaseKeysAt(redis, resources)));
}

/** Sets a resource's counter on every node, by node (what lagging nodes or earlier acquisitions would have left). */
export async function setCounters(admin: readonly Redis[], resource: string, values: readonly (bigint | string)[]): Promise<void> {
  await Promise.all(admin.map((redis, i) => redis.set(resourceKeys(resource).counter, String(values[i]))));
}

/** One ACQUIRE a client sent: the lease value it asked every node to store, and the lease keys it named. */
export interface SentAcquire {
  readonly value: string;
  readonly leaseKeys: readonly string[];
}

/**
 * Records every ACQUIRE the lock sends through these clients (EVALSHA, or EVAL after NOSCRIPT), before
 * it is sent: the test learns the value of every attempt, also of those that failed and whose value
 * the lock keeps to itself. `sent` is in the order sent, one entry per attempt (the first node's
 * call); `byValue` (shared between recorders when given) finds an attempt by its value.
 */
export function recordAcquires(
  clients: readonly LockClient[],
  byValue = new Map<string, SentAcquire>(),
): { readonly sent: SentAcquire[]; readonly byValue: Map<string, SentAcquire> } {
  const sent: SentAcquire[] = [];
  const note = (keysAndArgs: readonly (string | number)[], numberOfKeys: number): void => {
    const keys = keysAndArgs.slice(0, numberOfKeys).map(String);
    const value = String(keysAndArgs[numberOfKeys]);
    if (byValue.has(value)) return;
    const attempt = { value, leaseKeys: keys.filter((_, i) => i % 2 === 0) };
    byValue.set(value, attempt);
    sent.push(attempt);
  };
  for (const client of clients) {
    const evalsha = client.evalsha.bind(client);
    const evalScript = client.eval.bind(client);
    client.evalsha = (sha, numberOfKeys, ...keysAndArgs) => {
      if (sha === SCRIPTS.acquire.sha) note(keysAndArgs, numberOfKeys);
      return evalsha(sha, numberOfKeys, ...keysAndArgs);
    };
    client.eval = (script, numberOfKeys, ...keysAndArgs) => {
      if (script === SCRIPTS.acquire.source) note(keysAndArgs, numberOfKeys);
      return evalScript(script, numberOfKeys, ...keysAndArgs);
    };
  }
  return { sent, byValue };
}
