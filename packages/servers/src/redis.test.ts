import { existsSync } from "node:fs";
import { connect } from "node:net";
import { Cluster, Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "./processes.js";
import { startRedisCluster, type RedisCluster } from "./redis-cluster.js";
import { redisCommands } from "./redis-probe.js";
import { startRedisNodes, type RedisNodeHandle, type RedisNodes } from "./redis.js";

/** A client that fails fast instead of reconnecting or queueing, so a dead or stopped node shows. */
async function client(node: RedisNodeHandle, commandTimeout = 2_000): Promise<Redis> {
  const redis = new Redis({
    host: node.host,
    port: node.port,
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    commandTimeout,
  });
  await redis.connect();
  return redis;
}

async function withClient<T>(node: RedisNodeHandle, use: (redis: Redis) => Promise<T>): Promise<T> {
  const redis = await client(node);
  try {
    return await use(redis);
  } finally {
    redis.disconnect();
  }
}

/** The error code of a plain TCP connect, or "connected". */
function connectOutcome(host: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.once("connect", () => {
      socket.destroy();
      resolve("connected");
    });
    socket.once("error", (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function serverPid(node: RedisNodeHandle): Promise<number> {
  const info = await withClient(node, (r) => r.info("server"));
  return Number(/^process_id:(\d+)/m.exec(info)?.[1]);
}

describe("startRedisNodes with faults", () => {
  let set: RedisNodes;

  beforeAll(async () => {
    set = await startRedisNodes(3, { faults: true });
  });
  afterAll(async () => {
    await set?.stop();
  });

  it("starts independent nodes named A, B, C that answer, with fsync-always persistence", async () => {
    expect(set.source).not.toBe("env");
    expect(set.nodes.map((n) => n.name)).toEqual(["A", "B", "C"]);
    expect(new Set(set.urls).size).toBe(3);
    for (const node of set.nodes) {
      expect(node.url).toBe(`redis://${node.host}:${node.port}`);
      expect(node.controllable && node.running && !node.paused).toBe(true);
      await withClient(node, async (r) => {
        expect(await r.ping()).toBe("PONG");
        expect(await r.config("GET", "appendonly")).toEqual(["appendonly", "yes"]);
        expect(await r.config("GET", "appendfsync")).toEqual(["appendfsync", "always"]);
      });
    }
    // Independent servers: a key written on A is not on B.
    await withClient(set.nodes[0]!, (r) => r.set("only-on-a", "1"));
    expect(await withClient(set.nodes[1]!, (r) => r.get("only-on-a"))).toBeNull();
  });

  it("kill refuses connections; restart keeps acknowledged writes, restart without data loses them", async () => {
    const node = set.nodes[0]!;
    const port = node.port;
    await withClient(node, (r) => r.set("before-kill", "kept"));
    await node.kill();
    expect(node.running).toBe(false);
    expect(await connectOutcome(node.host, port)).toBe("ECONNREFUSED");

    await node.restart();
    expect(node.running).toBe(true);
    expect(node.port).toBe(port);
    expect(await withClient(node, (r) => r.get("before-kill"))).toBe("kept");

    await node.restart({ keepData: false });
    expect(node.port).toBe(port);
    expect(await withClient(node, (r) => r.dbsize())).toBe(0);
  });

  it("pause makes a node silent without dropping connections; resume makes it answer again", async () => {
    const node = set.nodes[1]!;
    const redis = await client(node, 300);
    try {
      expect(await redis.ping()).toBe("PONG");
      node.pause();
      expect(node.paused).toBe(true);
      await expect(redis.ping()).rejects.toThrow(/timed out/i);
      await expect(redisCommands(node.host, node.port, ["PING"], 300)).rejects.toThrow(/no reply/);
      node.resume();
      expect(node.paused).toBe(false);
      expect(await redisCommands(node.host, node.port, ["PING"], 1_000)).toEqual(["PONG"]);
      expect(await redis.ping()).toBe("PONG");
    } finally {
      redis.disconnect();
    }
  });

  it("a node that is not clock-controlled refuses a clock offset", () => {
    expect(() => set.nodes[2]!.setClockOffsetMs(1_000)).toThrow(/clock control/);
  });

  it("stop() kills every server and is idempotent", async () => {
    const pids = set.source === "local" ? await Promise.all(set.nodes.map(serverPid)) : [];
    const dirs =
      set.source === "local"
        ? await Promise.all(set.nodes.map((n) => withClient(n, async (r) => (await r.config("GET", "dir")) as string[])))
        : [];
    expect(pids.every((pid) => pid > 0 && pidAlive(pid))).toBe(true);
    await set.stop();
    await set.stop();
    for (const pid of pids) expect(pidAlive(pid)).toBe(false);
    for (const [, dir] of dirs) expect(dir !== undefined && existsSync(dir)).toBe(false);
    for (const node of set.nodes) expect(await connectOutcome(node.host, node.port)).toBe("ECONNREFUSED");
  });
});

describe("persistence: none", () => {
  it("loses writes on restart, which is why lock nodes default to fsync-always", async () => {
    const set = await startRedisNodes(1, { faults: true, persistence: "none" });
    try {
      const node = set.nodes[0]!;
      await withClient(node, async (r) => {
        await r.set("volatile", "1");
        expect(await r.config("GET", "appendonly")).toEqual(["appendonly", "no"]);
      });
      await node.restart();
      expect(await withClient(node, (r) => r.get("volatile"))).toBeNull();
    } finally {
      await set.stop();
    }
  });
});

describe("clock control", () => {
  it("a forward clock jump on one node expires its keys early; the other node keeps them", async () => {
    const set = await startRedisNodes(2, { clockControl: [1] });
    try {
      expect(set.source).toBe("local");
      const [steady, jumpy] = [set.nodes[0]!, set.nodes[1]!];
      for (const node of set.nodes) await withClient(node, (r) => r.set("lease", "v", "PX", 10_000));

      jumpy.setClockOffsetMs(20_000);
      const jumpedAt = Date.now();
      await waitFor(
        "the key to expire on the node whose clock jumped",
        async () => (await withClient(jumpy, (r) => r.get("lease"))) === null,
        1_000,
      );
      expect(Date.now() - jumpedAt).toBeLessThan(1_000);

      expect(await withClient(steady, (r) => r.get("lease"))).toBe("v");
      expect(await withClient(steady, (r) => r.pttl("lease"))).toBeGreaterThan(5_000);
      const [jumpySeconds] = await withClient(jumpy, (r) => r.time());
      const [steadySeconds] = await withClient(steady, (r) => r.time());
      expect(Number(jumpySeconds) - Number(steadySeconds)).toBeGreaterThanOrEqual(19);
      expect(Number(jumpySeconds) - Number(steadySeconds)).toBeLessThanOrEqual(21);
    } finally {
      await set.stop();
    }
  });
});

describe("source selection", () => {
  const saved = { urls: process.env.REDIS_URLS, path: process.env.PATH, docker: process.env.FENCED_NO_DOCKER };
  afterAll(() => {
    for (const [key, value] of [
      ["REDIS_URLS", saved.urls],
      ["PATH", saved.path],
      ["FENCED_NO_DOCKER", saved.docker],
    ] as const) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
  });

  it("uses REDIS_URLS when no faults are needed, and says so when too few are given", async () => {
    process.env.REDIS_URLS = "redis://127.0.0.1:6390, redis://127.0.0.1:6391";
    const set = await startRedisNodes(2);
    expect(set.source).toBe("env");
    expect(set.urls).toEqual(["redis://127.0.0.1:6390", "redis://127.0.0.1:6391"]);
    expect(set.nodes[1]!.port).toBe(6391);
    expect(set.nodes[0]!.controllable).toBe(false);
    await expect(set.nodes[0]!.kill()).rejects.toThrow(/cannot be controlled/);
    await set.stop();
    await expect(startRedisNodes(3)).rejects.toThrow(/REDIS_URLS lists 2 endpoint\(s\) but 3 are needed/);
  });

  it("a missing redis-server is an error that says what to install", async () => {
    process.env.REDIS_URLS = "";
    process.env.FENCED_NO_DOCKER = "1";
    process.env.PATH = "/nonexistent";
    await expect(startRedisNodes(1, { faults: true })).rejects.toThrow(/apt-get install redis-server/);
    process.env.PATH = saved.path;
  });
});

describe("startRedisCluster", () => {
  let cluster: RedisCluster | undefined;
  afterAll(async () => {
    await cluster?.stop();
  });

  it("forms a 3-master cluster that serves keys from different slots", async () => {
    cluster = await startRedisCluster();
    expect(cluster.startupNodes).toHaveLength(3);
    const { host, port } = cluster.startupNodes[0]!;
    const [slotFoo, slotBar] = await redisCommands(host, port, ["CLUSTER KEYSLOT foo", "CLUSTER KEYSLOT bar"]);
    expect(slotFoo).not.toBe(slotBar);

    const redis = new Cluster(cluster.startupNodes, { clusterRetryStrategy: () => null });
    try {
      await redis.set("foo", "1");
      await redis.set("bar", "2");
      expect(await redis.get("foo")).toBe("1");
      expect(await redis.get("bar")).toBe("2");
    } finally {
      redis.disconnect();
    }

    // Each key lives on exactly one master (the others answer MOVED), and not on the same one.
    const owners = await Promise.all(
      ["foo", "bar"].map(async (key) => {
        const replies = await Promise.all(cluster!.startupNodes.map((n) => redisCommands(n.host, n.port, [`GET ${key}`])));
        const owning = replies.flatMap(([reply], i) => (typeof reply === "string" ? [i] : []));
        expect(replies.filter(([reply]) => reply instanceof Error && reply.message.startsWith("MOVED"))).toHaveLength(2);
        return owning;
      }),
    );
    expect(owners[0]).toHaveLength(1);
    expect(owners[1]).toHaveLength(1);
    expect(owners[0]![0]).not.toBe(owners[1]![0]);
  });
});
