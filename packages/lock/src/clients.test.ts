import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { MAX_TOKEN } from "@fenced/fence";
import { ANSWERING_NODE_TIMEOUT_MS } from "@fenced/servers";
import { createClient as createNodeRedis5, RESP_TYPES as RESP_TYPES_5 } from "redis";
import { createClient as createNodeRedis6, RESP_TYPES as RESP_TYPES_6 } from "redis-6";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { redisErrorCode } from "./client.js";
import { LockNotAcquiredError, TokenSpaceExhaustedError } from "./errors.js";
import { fromNodeRedis, type NodeRedisClient } from "./node-redis.js";
import { resourceKeys } from "./keys.js";
import { Redlock } from "./redlock.js";
import { SCRIPTS } from "./scripts.js";
import {
  countersOn,
  drained,
  holdAs,
  CLIENT_KINDS,
  clientTraits,
  leaseValuesOn,
  loadScripts,
  ready,
  refusedReconnect,
  startTestNodes,
  type TestNodes,
} from "./test-support.js";

/**
 * The lock takes a user's ioredis 5 or 6 client, or iovalkey's (Valkey's fork of ioredis 5), as it
 * is, and node-redis 5 or 6 through fromNodeRedis. The rest of the suite runs on ioredis 5; these
 * scenarios run the lock on each client, covering the surface a client adapts: the commands, reply
 * types (integers, decimal strings), error replies (NOSCRIPT), connection state and errors (a killed
 * node), and what a paused node's client queues. The rest (quorum, drift, wipes, clock jumps) is the
 * lock's own logic over those answers, and runs once.
 */
describe.each(CLIENT_KINDS)("the lock on %s clients", (kind) => {
  const traits = clientTraits(kind);
  let t: TestNodes;
  let redlock: Redlock;

  beforeAll(async () => {
    t = await startTestNodes(3, { faults: true }, { client: kind, failFast: true });
    await Promise.all(t.admin.map(loadScripts));
    // No node is silent in these tests (a killed one is known down, refused at once), and they name the
    // nodes' answers: a node timeout far above any answer, so that a busy machine cannot turn one into a timeout.
    redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
  });
  afterAll(async () => {
    await t?.stop();
  });

  it("acquire, extend and release act on every node; a second acquirer is refused while it is held", async () => {
    const resource = "majors/basic";
    const { lease: leaseKey } = resourceKeys(resource);
    const lease = await redlock.acquire(resource, 2_000);
    await drained(t.clients);
    expect(lease.token).toBe(1n);
    expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(3).fill(lease.value));
    const refused = await new Redlock(await t.moreClients(), { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS })
      .acquire(resource, 2_000)
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LockNotAcquiredError);
    await lease.extend(30_000);
    await drained(t.clients);
    for (const redis of t.admin) expect(await redis.pttl(leaseKey)).toBeGreaterThan(29_000);
    await lease.release();
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual([null, null, null]);
    const next = await redlock.acquire(resource, 2_000);
    expect(next.token).toBe(2n);
    await next.release();
  });

  it("tokens stay exact across 2^53 and up to 2^63 - 1, then the resource is exhausted with nothing left behind", async () => {
    const resource = "majors/big";
    const tokens: bigint[] = [];
    for (const start of [2n ** 53n - 2n, MAX_TOKEN - 2n]) {
      // acquire() and release() return once a majority answered: the third node's increment may still
      // be on its way, and would land on the counter set here.
      await drained(t.clients);
      await Promise.all(t.admin.map((r) => r.set(resourceKeys(resource).counter, start.toString())));
      for (let i = 0; i < 2; i++) {
        const lease = await redlock.acquire(resource, 5_000);
        tokens.push(lease.token);
        await lease.release();
      }
    }
    expect(tokens).toEqual([2n ** 53n - 1n, 2n ** 53n, MAX_TOKEN - 1n, MAX_TOKEN]);
    await expect(redlock.acquire(resource, 5_000)).rejects.toBeInstanceOf(TokenSpaceExhaustedError);
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual([null, null, null]);
    expect(await countersOn(t.admin, resource)).toEqual([MAX_TOKEN, MAX_TOKEN, MAX_TOKEN]);
  });

  it("every token is exact in the last stretch below 2^53, where a client that reads integer replies into doubles may round", async () => {
    // ioredis 6 decodes RESP integers as `n * 10 + byte - 48` in doubles: odd values within 48 of 2^53
    // come back as a neighbouring even one. Tokens there must not arrive as integer replies.
    const resource = "majors/below-2^53";
    for (const start of [2n ** 52n - 3n, 2n ** 53n - 60n]) {
      await drained(t.clients);
      await Promise.all(t.admin.map((r) => r.set(resourceKeys(resource).counter, start.toString())));
      const tokens: bigint[] = [];
      const count = start < 2n ** 53n - 100n ? 6 : 64;
      for (let i = 0; i < count; i++) {
        const lease = await redlock.acquire(resource, 5_000);
        tokens.push(lease.token);
        await lease.release();
      }
      expect(tokens).toEqual(Array.from({ length: count }, (_, i) => start + 1n + BigInt(i)));
    }
  });

  it("an empty script cache answers NOSCRIPT, classified by its error code (GLIDE: never asked), and the lock loads the script", async () => {
    const client = t.clients[0]!;
    const error = await client.evalsha("0".repeat(40), 0).catch((e: unknown) => e);
    // GLIDE names no code: its adapter sends the lock's scripts as EVAL, which is never answered NOSCRIPT.
    expect(redisErrorCode(error)).toBe(traits.replyCodes ? "NOSCRIPT" : undefined);
    expect(redisErrorCode(new Error("NOSCRIPT lookalike, not a reply"))).toBeUndefined();
    await Promise.all(t.admin.map((r) => r.script("FLUSH")));
    const lease = await redlock.acquire("majors/noscript", 2_000);
    await lease.extend(2_000);
    await lease.release();
    // A node that answers the RELEASE NOSCRIPT after the quorum has is sent its EVAL then, which can
    // follow a drain's PING: wait for the keys to go, as the EVAL makes them.
    await expect.poll(() => leaseValuesOn(t.admin, "majors/noscript"), { timeout: ANSWERING_NODE_TIMEOUT_MS }).toEqual([null, null, null]);
    for (const redis of t.admin)
      expect(await redis.script("EXISTS", SCRIPTS.acquire.sha, SCRIPTS.extend.sha, SCRIPTS.release.sha)).toEqual([1, 1, 1]);
  });

  it("contenders on their own connections never hold it at once, and their tokens increase in grant order", async () => {
    const resource = "majors/contention";
    const contenders = await Promise.all(
      Array.from(
        { length: 4 },
        async () => new Redlock(await t.moreClients(), { retryCount: Number.POSITIVE_INFINITY, retryDelayMs: 2, retryJitterMs: 8 }),
      ),
    );
    let holders = 0;
    let overlaps = 0;
    const granted: bigint[] = [];
    await Promise.all(
      contenders.map(async (contender) => {
        for (let i = 0; i < 10; i++) {
          const lease = await contender.acquire(resource, 2_000);
          if (++holders > 1) overlaps++;
          granted.push(lease.token);
          await sleep(1);
          holders--;
          await lease.release();
        }
      }),
    );
    expect(overlaps).toBe(0);
    expect(granted).toHaveLength(40);
    for (let i = 1; i < granted.length; i++)
      expect(granted[i]! > granted[i - 1]!, `grant ${i}: ${granted[i]} after ${granted[i - 1]}`).toBe(true);
  });

  it("a paused node (SIGSTOP) holds up nothing: two grant, and once resumed it runs what its client queued, the release last", async () => {
    const resource = "majors/paused";
    t.nodes[2]!.pause();
    try {
      const started = performance.now();
      const lease = await redlock.acquire(resource, 5_000);
      // A quorum granted: the acquire did not wait out the paused node's timeout.
      expect(performance.now() - started).toBeLessThan(ANSWERING_NODE_TIMEOUT_MS);
      expect(lease.token).toBe(1n);
      await lease.release();
      expect(await leaseValuesOn(t.admin.slice(0, 2), resource)).toEqual([null, null]);
    } finally {
      t.nodes[2]!.resume();
    }
    await drained(t.clients);
    // The paused node ran its ACQUIRE and then the RELEASE, in the order sent: no lease key is left.
    expect(await leaseValuesOn(t.admin, resource)).toEqual([null, null, null]);
    expect(await countersOn(t.admin, resource)).toEqual([1n, 1n, 1n]);
  });

  it("a killed node counts as refused (GLIDE: its own error), the other two grant, and the node serves again once restarted", async () => {
    const resource = "majors/killed";
    const refused = traits.connectionEvents ? refusedReconnect(t.clients[2]!) : undefined;
    await t.nodes[2]!.kill();
    // Until the client has tried to reconnect, a killed node is only a closed connection (an `error` without code).
    await refused;
    try {
      const lease = await redlock.acquire(resource, 2_000);
      expect(lease.token).toBe(1n);
      await lease.release();
      // With node A held by someone else, B's grant is not enough: the attempt fails on A's refusal and C being down.
      await holdAs(t.admin[0]!, "majors/killed-held", "another-holder", 5_000);
      const error = await redlock.acquire("majors/killed-held", 2_000).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockNotAcquiredError);
      // B granted, or had not answered when A and C decided the attempt.
      // A client without connection events cannot know the node down: its call fails (GLIDE's own
      // timeout) or times out in the round, and the round waits for it.
      expect((error as LockNotAcquiredError).nodes.filter((n) => n.node !== 1).map((n) => [n.node, n.reason])).toEqual([
        [0, "held"],
        [2, traits.connectionEvents ? "refused" : expect.stringMatching(/^(error|timeout)$/)],
      ]);
    } finally {
      await t.nodes[2]!.restart({ keepData: true });
      await Promise.all([ready(t.clients[2]!), ready(t.admin[2]!)]);
    }
    await loadScripts(t.admin[2]!);
    const after = await redlock.acquire(resource, 2_000);
    expect(after.token).toBe(2n);
    await drained(t.clients);
    expect(await leaseValuesOn(t.admin, resource)).toEqual(Array(3).fill(after.value));
    await after.release();
  });
});

describe("a node-redis client's own command options", () => {
  /** What this test uses of a node-redis client made with defaults of its own. */
  interface Defaulted extends NodeRedisClient {
    connect(): Promise<unknown>;
    incr(key: string): Promise<unknown>;
    destroy(): void;
  }
  // Integers read as strings, every command ahead of the queue: the client's defaults, not the lock's.
  const majors: [string, (url: string) => Defaulted][] = [
    ["5", (url) => createNodeRedis5({ url, commandOptions: { asap: true, typeMapping: { [RESP_TYPES_5.NUMBER]: String } } })],
    ["6", (url) => createNodeRedis6({ url, commandOptions: { asap: true, typeMapping: { [RESP_TYPES_6.NUMBER]: String } } })],
  ];
  it.each(majors)("redis %s: a typeMapping and asap as its defaults do not reach the lock's commands", async (_major, create) => {
    const t = await startTestNodes(1);
    const client = create(t.nodes[0]?.url ?? "");
    client.on("error", () => undefined);
    try {
      await client.connect();
      expect(await client.incr("defaults-apply")).toBe("1");
      const redlock = new Redlock([fromNodeRedis(client)], { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
      const first = await redlock.acquire("node-redis/options", 2_000);
      await first.release();
      const second = await redlock.acquire("node-redis/options", 2_000);
      expect([first.token, second.token]).toEqual([1n, 2n]);
      await second.release();
    } finally {
      client.destroy();
      await t.stop();
    }
  });
});
