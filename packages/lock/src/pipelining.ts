import type { RedisClient, RedisPipeline } from "./client.js";
import type { ScriptCall } from "./quorum.js";

/**
 * Every script the lock runs leaves through sendScript. On a client with `pipeline()` (both ioredis
 * majors), the calls made to it within one tick — what a busy process's concurrent operations send
 * to a node between two reads of its socket — go out as one pipeline: one socket write, where each
 * command would otherwise cost one. A client without `pipeline()` (a structural RedisClient of the
 * user's own) gets each call as its own EVALSHA, as does a tick with a single call.
 *
 * The invariant this must not break: **on each client, the lock's commands reach the node in the
 * order the lock issued them** — a lease's RELEASE after its ACQUIRE, an EXTEND after the ACQUIRE it
 * extends. Every script call queues here, in issue order; a flush sends the queue in that order, as
 * one pipeline (which ioredis writes in order on one connection) or its one call; and each flush is
 * sent whole before the next can start. A Cluster client sends commands of different slots over
 * different connections, in no order the lock relies on (a call's keys share one slot: keys.ts), so
 * there the queue is split by hash tag, each part in issue order; keys with one tag share a slot.
 * A Cluster client that is not `ready` gets one EVALSHA per call: it parks a pipeline until it knows
 * its slots and then queues it behind calls issued after it (and an ended one never answers it).
 *
 * A pipeline whose connection is cut after part of it was answered has the rest rejected (ioredis does
 * not send those again once it reconnects, as it does single commands): a RELEASE among them is
 * not retried, and the lease key stays on that node until its TTL — liveness, as any node that missed
 * a release. A client's own `pipeline()` replaces its `evalsha` for the pipelined calls: a wrapper
 * around a Cluster client must pass `isCluster` on with it. A `pipeline()` that throws sends the calls
 * one by one instead; an `exec()` that throws fails them.
 *
 * Not queued: the EVAL that retries a NOSCRIPT answer and the SCRIPT LOAD that replaces it
 * (quorum.ts, fallBack). They follow the answer of a call already sent, so they can only overtake
 * calls issued after it — which is what fallBack already argues for commands already on the wire.
 */

interface Pending {
  readonly call: ScriptCall;
  readonly resolve: (value: unknown) => void;
  readonly reject: (err: unknown) => void;
}

/** The calls queued for one client in the current tick; a flush is scheduled whenever it is non-empty. */
const queues = new WeakMap<RedisClient, Pending[]>();

export function sendScript(client: RedisClient, call: ScriptCall): Promise<unknown> {
  if (typeof client.pipeline !== "function") return evalSha(client, call);
  let queue = queues.get(client);
  if (queue === undefined) {
    queue = [];
    queues.set(client, queue);
    process.nextTick(flush, client);
  }
  const pending = queue;
  return new Promise((resolve, reject) => pending.push({ call, resolve, reject }));
}

function evalSha(client: RedisClient, call: ScriptCall): Promise<unknown> {
  const { script, keys, args } = call;
  return client.evalsha(script.sha, keys.length, ...keys, ...args);
}

function flush(client: RedisClient): void {
  const queue = queues.get(client) ?? [];
  queues.delete(client);
  if (client.isCluster !== true) return send(client, queue);
  if (client.status !== "ready") {
    for (const p of queue) sendOne(client, p);
    return;
  }
  const bySlot = new Map<string, Pending[]>();
  for (const p of queue) {
    const tag = hashTag(p.call.keys[0] ?? "");
    const part = bySlot.get(tag);
    if (part === undefined) bySlot.set(tag, [p]);
    else part.push(p);
  }
  for (const part of bySlot.values()) send(client, part);
}

/** The part of a key Redis Cluster hashes: from the first '{' to the next '}' when non-empty, else the key. */
function hashTag(key: string): string {
  const open = key.indexOf("{");
  const close = open === -1 ? -1 : key.indexOf("}", open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : key;
}

function sendOne(client: RedisClient, p: Pending): void {
  evalSha(client, p.call).then(p.resolve, p.reject);
}

function send(client: RedisClient, queue: readonly Pending[]): void {
  const [first] = queue;
  if (first === undefined) return;
  if (queue.length === 1) return sendOne(client, first);
  let pipeline: RedisPipeline;
  try {
    pipeline = (client.pipeline as () => RedisPipeline).call(client);
  } catch {
    // Nothing sent: one by one, in order.
    for (const p of queue) sendOne(client, p);
    return;
  }
  let answer: Promise<[Error | null, unknown][] | null>;
  try {
    for (const { call } of queue) pipeline.evalsha(call.script.sha, call.keys.length, ...call.keys, ...call.args);
    answer = Promise.resolve(pipeline.exec());
  } catch (err) {
    answer = Promise.reject(err instanceof Error ? err : new Error(String(err)));
  }
  answer.then(
    (results) => {
      queue.forEach((p, i) => {
        const result = results?.[i];
        if (result === undefined) p.reject(new Error("the pipeline's answer has no reply for this command"));
        else if (result[0] !== null) p.reject(result[0]);
        else p.resolve(result[1]);
      });
    },
    (err: unknown) => {
      for (const p of queue) p.reject(err);
    },
  );
}
