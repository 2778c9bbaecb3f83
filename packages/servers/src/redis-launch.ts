import { mkdir, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./ports.js";
import { killHard, requireExecutable, spawnTracked, waitFor, type Spawned } from "./processes.js";
import { redisReady } from "./redis-probe.js";
import { LOOPBACK, persistenceArgs, type RedisPersistence } from "./redis-node.js";

// Starting one local redis-server process on a port, for the lock nodes (redis.ts) and the cluster
// nodes (redis-cluster.ts).

const START_TIMEOUT_MS = 20_000;

export interface LocalServerSpec {
  /** Data directory (--dir); wiped by restart({ keepData: false }). */
  readonly dataDir: string;
  readonly persistence: RedisPersistence;
  readonly extraArgs?: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
}

class PortTaken extends Error {}

/**
 * Starts redis-server on the port and waits until that very process answers PING.
 * Throws PortTaken when the port (or the cluster bus port) was already in use.
 */
async function launchOnPort(port: number, spec: LocalServerSpec): Promise<Spawned> {
  const binary = requireExecutable("redis-server", "apt-get install redis-server");
  const args = [
    "--port",
    String(port),
    "--bind",
    LOOPBACK,
    "--protected-mode",
    "no",
    "--daemonize",
    "no",
    "--logfile",
    "",
    "--dir",
    spec.dataDir,
    ...persistenceArgs(spec.persistence),
    ...(spec.extraArgs ?? []),
  ];
  const spawned = spawnTracked(binary, args, { cwd: spec.dataDir, env: { ...process.env, ...spec.env } });
  let exited = false;
  void spawned.exited.then(() => {
    exited = true;
  });
  try {
    await waitFor(
      `redis-server on port ${port}`,
      async () => exited || (await redisReady(LOOPBACK, port, spawned.child.pid)),
      START_TIMEOUT_MS,
      () => spawned.output(),
    );
  } catch (err) {
    await killHard(spawned);
    throw err;
  }
  if (exited) {
    const output = spawned.output();
    if (/address already in use/i.test(output)) throw new PortTaken(output);
    throw new Error(`redis-server on port ${port} exited during start-up:\n${output}`);
  }
  return spawned;
}

/** Starts redis-server on a fresh port, trying another one if the chosen port was taken in the meantime. */
export async function launchOnFreePort(
  spec: LocalServerSpec,
  pickPort: () => Promise<number> = freePort,
): Promise<{ port: number; spawned: Spawned }> {
  for (let attempt = 1; ; attempt++) {
    const port = await pickPort();
    try {
      return { port, spawned: await launchOnPort(port, spec) };
    } catch (err) {
      if (!(err instanceof PortTaken) || attempt >= 8) throw err;
    }
  }
}

/** Starts redis-server again on a port it held before; another process may hold that port for a moment. */
export async function relaunchOnPort(port: number, spec: LocalServerSpec): Promise<Spawned> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    try {
      return await launchOnPort(port, spec);
    } catch (err) {
      if (!(err instanceof PortTaken) || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** A fresh temp dir for one server: data in <dir>/data, clock offset (if any) beside it, so wiping data keeps the offset. */
export async function makeServerDir(prefix: string): Promise<{ dir: string; dataDir: string }> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  const dataDir = join(dir, "data");
  await mkdir(dataDir);
  return { dir, dataDir };
}
