import { connect as netConnect, createServer, type Server, type Socket } from "node:net";
import { Cluster, Redis } from "ioredis";
import { Cluster as Cluster6 } from "ioredis-6";
import { startRedisCluster } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { RedisClient } from "./client.js";
import { resourceKeys } from "./keys.js";
import { Redlock } from "./redlock.js";
import { SCRIPTS } from "./scripts.js";
import { LockNotAcquiredError } from "./errors.js";
import {
  drained,
  holdAs,
  IOREDIS_MAJORS,
  leaseValuesOn,
  loadScripts,
  PIPELINE_KINDS,
  ready,
  refusedReconnect,
  startTestNodes,
  type LockClient,
  type TestNodes,
} from "./test-support.js";

/** Counts the socket writes a client makes from now on (ioredis keeps its connection's socket as `stream`). */
function countWrites(client: LockClient): { readonly count: () => number; readonly stop: () => void } {
  const socket = (client as unknown as { stream: Socket }).stream;
  const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
  let writes = 0;
  socket.write = (...args: unknown[]): boolean => {
    writes++;
    return write(...args);
  };
  // The socket's own method again (the prototype's): what it was before.
  return { count: () => writes, stop: () => void Reflect.deleteProperty(socket, "write") };
}

/** The same client seen through the structural type alone: no `pipeline()`. */
const withoutPipeline = (c: LockClient): RedisClient => ({
  evalsha: (...a) => c.evalsha(...a),
  eval: (...a) => c.eval(...a),
  script: (...a) => c.script(...a),
  ping: () => c.ping(),
});

const N = 16;

/** pipelining.ts: the scripts of one tick leave for each node in one socket write. */
describe.each(PIPELINE_KINDS)("scripts of one tick, one write per node (%s)", (kind) => {
  let t: TestNodes;

  beforeAll(async () => {
    t = await startTestNodes(3, {}, { client: kind });
    await Promise.all(t.admin.map(loadScripts));
  });
  afterAll(async () => {
    await t?.stop();
  });

  const acquireAll = async (redlock: Redlock, prefix: string): Promise<number[]> => {
    const counters = t.clients.map(countWrites);
    try {
      const leases = await Promise.all(Array.from({ length: N }, (_, i) => redlock.acquire(`${prefix}/${i}`, 5_000)));
      const writes = counters.map((c) => c.count());
      expect(leases.map((l) => l.token)).toEqual(Array.from({ length: N }, () => 1n));
      await Promise.all(leases.map((l) => l.release()));
      await drained(t.clients);
      // A release resolves once a majority answered: the last node's may still be on its way, as an
      // EVALSHA answered NOSCRIPT whose EVAL is sent after the PING above was. Wait for it, well under
      // the leases' 5 s TTL, so that a release that never arrives still fails (the keys outlive the wait).
      await vi.waitFor(
        async () => {
          for (let i = 0; i < N; i++) expect(await leaseValuesOn(t.admin, `${prefix}/${i}`)).toEqual([null, null, null]);
        },
        { timeout: 2_000, interval: 20 },
      );
      return writes;
    } finally {
      for (const c of counters) c.stop();
    }
  };

  it(`${N} concurrent acquires: one write per node with pipeline(), ${N} through a client without it`, async () => {
    expect(await acquireAll(new Redlock(t.clients, { retryCount: 0 }), `pipe-${kind.replace(" ", "-")}/a`)).toEqual([1, 1, 1]);
    expect(await acquireAll(new Redlock(t.clients.map(withoutPipeline), { retryCount: 0 }), `pipe-${kind.replace(" ", "-")}/b`)).toEqual([
      N,
      N,
      N,
    ]);
  });

  it("a pipeline answered NOSCRIPT throughout: every call falls back to EVAL, and the nodes have the script after", async () => {
    await Promise.all(t.admin.map((r) => r.script("FLUSH")));
    await acquireAll(new Redlock(t.clients, { retryCount: 0 }), `pipe-${kind.replace(" ", "-")}/noscript`);
    for (const redis of t.admin) expect(await redis.script("EXISTS", SCRIPTS.acquire.sha, SCRIPTS.release.sha)).toEqual([1, 1]);
  });
});

describe.each(PIPELINE_KINDS)("pipelines and a killed node (%s)", (kind) => {
  it("concurrent acquires are granted by the other two and count the killed node refused; the cleanup releases sent to it fail alone", async () => {
    const t = await startTestNodes(3, { faults: true }, { client: kind, failFast: true });
    try {
      await Promise.all(t.admin.map(loadScripts));
      const redlock = new Redlock(t.clients, { retryCount: 0 });
      const refused = refusedReconnect(t.clients[2]!);
      await t.nodes[2]!.kill();
      await refused;
      const leases = await Promise.all(
        Array.from({ length: N }, (_, i) => redlock.acquire(`killed-${kind.replace(" ", "-")}/${i}`, 5_000)),
      );
      expect(leases.map((l) => l.token)).toEqual(Array.from({ length: N }, () => 1n));
      await Promise.all(leases.map((l) => l.release()));
      // Node A held by another: every attempt fails on A's refusal and C being down, and releases on the nodes it reached.
      await Promise.all(
        Array.from({ length: N }, (_, i) => holdAs(t.admin[0]!, `killed-${kind.replace(" ", "-")}/held-${i}`, "another", 5_000)),
      );
      const errors = await Promise.all(
        Array.from({ length: N }, (_, i) => redlock.acquire(`killed-${kind.replace(" ", "-")}/held-${i}`, 2_000).catch((e: unknown) => e)),
      );
      for (const error of errors) {
        expect(error).toBeInstanceOf(LockNotAcquiredError);
        expect((error as LockNotAcquiredError).nodes.filter((n) => n.node !== 1).map((n) => [n.node, n.reason])).toEqual([
          [0, "held"],
          [2, "refused"],
        ]);
      }
      await t.nodes[2]!.restart({ keepData: true });
      await Promise.all([ready(t.clients[2]!), ready(t.admin[2]!)]);
      await drained(t.clients);
      for (let i = 0; i < N; i++) {
        expect(await leaseValuesOn(t.admin, `killed-${kind.replace(" ", "-")}/${i}`)).toEqual([null, null, null]);
        expect(await leaseValuesOn(t.admin, `killed-${kind.replace(" ", "-")}/held-${i}`)).toEqual(["another", null, null]);
      }
    } finally {
      await t.stop();
    }
  });
});

describe("scripts of one tick on a Redis Cluster client", () => {
  it.each(IOREDIS_MAJORS)(
    "are pipelined by hash tag: concurrent acquires of resources in many slots are all granted (ioredis %i)",
    async (major) => {
      const cluster = await startRedisCluster(3);
      const options = { clusterRetryStrategy: () => null };
      const client = major === 5 ? new Cluster(cluster.startupNodes, options) : new Cluster6(cluster.startupNodes, options);
      try {
        const redlock = new Redlock([client], { retryCount: 0 });
        // Distinct resources: their keys fall in many slots, on all three masters.
        const leases = await Promise.all(Array.from({ length: N }, (_, i) => redlock.acquire(`cluster-pipe-${major}/${i}`, 5_000)));
        expect(leases.map((l) => l.token)).toEqual(Array.from({ length: N }, () => 1n));
        await Promise.all(leases.map((l) => l.release()));
        const values = await Promise.all(leases.map((l) => client.get(`{fenced:${l.resource}}:lease`)));
        expect(values).toEqual(Array.from({ length: N }, () => null));
      } finally {
        client.disconnect();
        await cluster.stop();
      }
    },
  );
});

/** A TCP proxy to `port` that keeps back what a client sends for `delayMs` after it connects. */
async function slowProxy(port: number, delayMs: number): Promise<{ port: number; close: () => void }> {
  const sockets: Socket[] = [];
  const server: Server = createServer((client) => {
    const upstream = netConnect(port, "127.0.0.1");
    sockets.push(client, upstream);
    client.pause();
    setTimeout(() => {
      client.pipe(upstream);
      client.resume();
    }, delayMs);
    upstream.pipe(client);
    for (const s of [client, upstream]) s.on("error", () => undefined);
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as { port: number }).port,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

describe("a Redis Cluster client that does not know its slots yet", () => {
  // A Cluster parks a pipeline until it knows its slots, then queues it behind single commands issued
  // after it: the cleanup RELEASEs of two timed-out acquires would run before their ACQUIREs.
  it.each(IOREDIS_MAJORS)("gets one call at a time: two acquires that time out leave no lease key behind (ioredis %i)", async (major) => {
    const cluster = await startRedisCluster(3);
    const admins = cluster.startupNodes.map((n) => new Redis(n.port, n.host));
    const proxy = await slowProxy(cluster.startupNodes[0]!.port, 600);
    const options = { clusterRetryStrategy: () => null };
    const client =
      major === 5
        ? new Cluster([{ host: "127.0.0.1", port: proxy.port }], options)
        : new Cluster6([{ host: "127.0.0.1", port: proxy.port }], options);
    try {
      await Promise.all(admins.map(loadScripts));
      const redlock = new Redlock([client], { retryCount: 0, nodeTimeoutMs: 100 });
      const resource = `slow-slots-${major}`;
      const results = await Promise.all([0, 1].map(() => redlock.acquire(resource, 30_000).catch((e: unknown) => e)));
      expect(results.map((e) => (e as Error).name)).toEqual(["LockNotAcquiredError", "LockNotAcquiredError"]);
      // Once the client knows its slots, everything it queued has run.
      await expect.poll(() => client.status, { timeout: 5_000 }).toBe("ready");
      await client.ping();
      const values = await Promise.all(admins.map((a) => a.get(resourceKeys(resource).lease).catch(() => null)));
      expect(values).toEqual([null, null, null]);
    } finally {
      client.disconnect();
      for (const a of admins) a.disconnect();
      proxy.close();
      await cluster.stop();
    }
  });
});

describe("a client of the user's own whose pipeline() fails", () => {
  let t: TestNodes;
  beforeAll(async () => {
    t = await startTestNodes(3);
    await Promise.all(t.admin.map(loadScripts));
  });
  afterAll(async () => {
    await t?.stop();
  });

  it("throwing: the calls go one by one, and every acquire is granted", async () => {
    const clients = t.clients.map((c) => ({
      ...withoutPipeline(c),
      pipeline: (): never => {
        throw new Error("no pipelines here");
      },
    }));
    const redlock = new Redlock(clients, { retryCount: 0 });
    const leases = await Promise.all(Array.from({ length: N }, (_, i) => redlock.acquire(`own-client/${i}`, 5_000)));
    expect(leases.map((l) => l.token)).toEqual(Array.from({ length: N }, () => 1n));
    await Promise.all(leases.map((l) => l.release()));
  });

  it("whose exec() throws: every node fails its calls, the acquires fail with LockNotAcquiredError, and the process lives", async () => {
    const clients = t.clients.map((c) => ({
      ...withoutPipeline(c),
      pipeline: () => ({
        evalsha: () => undefined,
        exec: (): never => {
          throw new Error("exec refused");
        },
      }),
    }));
    const redlock = new Redlock(clients, { retryCount: 0 });
    const errors = await Promise.all(Array.from({ length: N }, (_, i) => redlock.acquire(`own-exec/${i}`, 5_000).catch((e: unknown) => e)));
    for (const error of errors) {
      expect(error).toBeInstanceOf(LockNotAcquiredError);
      // Two errors decide it (no quorum left); the third node may not have been counted by then.
      const reasons = (error as LockNotAcquiredError).nodes.map((n) => n.reason);
      expect(reasons.filter((r) => r === "error").length).toBeGreaterThanOrEqual(2);
      expect(reasons.every((r) => r === "error" || r === "unanswered")).toBe(true);
    }
  });
});
