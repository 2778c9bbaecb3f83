import { createServer } from "node:net";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { freePort } from "./ports.js";
import { killHard, requireExecutable, spawnTracked, waitFor, type Spawned } from "./processes.js";
import { redisCommands } from "./redis-probe.js";
import { launchOnFreePort, makeServerDir } from "./redis-launch.js";
import { LOOPBACK } from "./redis-node.js";

export interface RedisCluster {
  /** One redis://host:port per master. */
  readonly urls: readonly string[];
  /** What ioredis' `new Cluster(startupNodes)` expects. */
  readonly startupNodes: { host: string; port: number }[];
  /** Kills every node and removes the temp dirs; idempotent. */
  stop(): Promise<void>;
}

/** Highest client port whose cluster bus port (port + 10000) is still a valid port. */
const MAX_CLIENT_PORT = 55_535;

function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once("error", () => resolve(false));
    server.listen(port, LOOPBACK, () => server.close(() => resolve(true)));
  });
}

/** A free port whose cluster bus port is free too; Redis Cluster always listens on both. */
async function freeClusterPort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = await freePort();
    if (port <= MAX_CLIENT_PORT && (await portIsFree(port + 10_000))) return port;
  }
  throw new Error("could not find a free port pair (port, port + 10000) for a Redis Cluster node");
}

async function runToCompletion(command: string, args: readonly string[]): Promise<string> {
  const spawned = spawnTracked(command, args);
  await spawned.exited;
  const { exitCode } = spawned.child;
  if (exitCode !== 0)
    throw new Error(`${command} ${args.join(" ")} exited with ${String(exitCode ?? spawned.child.signalCode)}:\n${spawned.output()}`);
  return spawned.output();
}

/**
 * A real Redis Cluster of `masters` local redis-server processes (no replicas), with every slot
 * assigned and cluster_state:ok on all nodes before it resolves.
 */
export async function startRedisCluster(masters = 3): Promise<RedisCluster> {
  // redis-cli refuses to create a cluster with fewer than 3 masters.
  if (!Number.isInteger(masters) || masters < 3) throw new Error(`a Redis Cluster needs at least 3 masters, got ${masters}`);
  requireExecutable("redis-server", "apt-get install redis-server");
  const redisCli = requireExecutable("redis-cli", "apt-get install redis-server");

  const dirs: string[] = [];
  const processes: Spawned[] = [];
  const ports: number[] = [];
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      await Promise.allSettled(processes.map((p) => killHard(p)));
      await Promise.allSettled(dirs.map((d) => rm(d, { recursive: true, force: true })));
    })();
    return stopping;
  };

  try {
    await Promise.all(
      Array.from({ length: masters }, async (_, i) => {
        const { dir, dataDir } = await makeServerDir(`fenced-redis-cluster-${i}-`);
        dirs.push(dir);
        const { port, spawned } = await launchOnFreePort(
          {
            dataDir,
            persistence: "fsync-always",
            extraArgs: ["--cluster-enabled", "yes", "--cluster-config-file", join(dataDir, "nodes.conf"), "--cluster-node-timeout", "5000"],
          },
          freeClusterPort,
        );
        processes.push(spawned);
        ports[i] = port;
      }),
    );

    const hostPorts = ports.map((p) => `${LOOPBACK}:${p}`);
    await runToCompletion(redisCli, ["--cluster", "create", ...hostPorts, "--cluster-replicas", "0", "--cluster-yes"]);
    // redis-cli returns once the config is consistent, but a node may report ok a little later.
    await waitFor(
      "cluster_state:ok on every Redis Cluster node",
      async () => {
        const infos = await Promise.all(ports.map((p) => redisCommands(LOOPBACK, p, ["CLUSTER INFO"])));
        return infos.every(([info]) => typeof info === "string" && /^cluster_state:ok\r?$/m.test(info));
      },
      20_000,
    );
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    urls: ports.map((p) => `redis://${LOOPBACK}:${p}`),
    startupNodes: ports.map((port) => ({ host: LOOPBACK, port })),
    stop,
  };
}
