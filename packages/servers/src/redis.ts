import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { CLOCK_OFFSET_FILE_ENV, compileClockShim, writeClockOffset } from "./clock-shim.js";
import { dockerAvailable } from "./docker.js";
import { continueTree, killHard, requireExecutable, stopTree, type Spawned } from "./processes.js";
import { startDockerRedisNode } from "./redis-docker.js";
import { launchOnFreePort, makeServerDir, relaunchOnPort, type LocalServerSpec } from "./redis-launch.js";
import {
  LOOPBACK,
  nodeName,
  type OwnedRedisNode,
  type RedisNodeHandle,
  type RedisNodes,
  type RedisPersistence,
  type StartRedisOptions,
} from "./redis-node.js";

export type { RedisNodeHandle, RedisNodes, StartRedisOptions } from "./redis-node.js";

/**
 * The per-node timeout (the lock's `nodeTimeoutMs`) of a test in which every lock node that is up
 * must answer: the test means a grant, a refusal or a token, not a node's timeout. The lock's
 * default, 200 ms, is an operator's liveness setting; on a busy machine a node's answer can take
 * most of it. Measured here beside a loaded run of the suite (`stress-ng --cpu 2`, load average 7–9),
 * one client's SET + INCR script every 5 ms for 60 s: at most 96 ms (p99.9 10 ms) on a node without
 * persistence, 118 ms (p99.9 29 ms) with `appendfsync always`. 2,000 ms is 17× the worst: a node
 * that answers costs nothing of it, and a node that is down refuses at once (or is known down).
 */
export const ANSWERING_NODE_TIMEOUT_MS = 2_000;

class LocalRedisNode implements OwnedRedisNode {
  readonly host = LOOPBACK;
  readonly controllable = true;
  private pausedNow = false;

  constructor(
    readonly name: string,
    readonly port: number,
    private spawned: Spawned | undefined,
    private readonly dir: string,
    private readonly spec: LocalServerSpec,
    private readonly offsetFile: string | undefined,
  ) {}

  get url(): string {
    return `redis://${this.host}:${this.port}`;
  }

  get running(): boolean {
    const child = this.spawned?.child;
    return child !== undefined && child.exitCode === null && child.signalCode === null;
  }

  get paused(): boolean {
    return this.pausedNow && this.running;
  }

  async kill(): Promise<void> {
    if (this.spawned !== undefined) await killHard(this.spawned);
    this.pausedNow = false;
  }

  async restart(options: { keepData?: boolean } = {}): Promise<void> {
    await this.kill();
    this.spawned = undefined;
    if (options.keepData === false) {
      await rm(this.spec.dataDir, { recursive: true, force: true });
      await mkdir(this.spec.dataDir, { recursive: true });
    }
    this.spawned = await relaunchOnPort(this.port, this.spec);
  }

  /** SIGSTOP; returns once the server is stopped, so nothing sent after it is answered before resume(). */
  pause(): void {
    if (!this.running || this.spawned === undefined) throw new Error(`Redis node ${this.name} is not running`);
    stopTree(this.spawned);
    this.pausedNow = true;
  }

  resume(): void {
    if (!this.running || this.spawned === undefined) throw new Error(`Redis node ${this.name} is not running`);
    continueTree(this.spawned); // every process pause() stopped
    this.pausedNow = false;
  }

  setClockOffsetMs(ms: number): void {
    if (this.offsetFile === undefined) {
      throw new Error(
        `Redis node ${this.name} was not started with clock control; pass its index in startRedisNodes(n, { clockControl: [...] })`,
      );
    }
    writeClockOffset(this.offsetFile, ms);
  }

  async dispose(): Promise<void> {
    await this.kill();
    await rm(this.dir, { recursive: true, force: true });
  }
}

async function startLocalNode(index: number, persistence: RedisPersistence, clock: boolean): Promise<LocalRedisNode> {
  const { dir, dataDir } = await makeServerDir(`fenced-redis-${nodeName(index)}-`);
  try {
    let offsetFile: string | undefined;
    let env: NodeJS.ProcessEnv | undefined;
    if (clock) {
      offsetFile = join(dir, "clock-offset-ms");
      writeClockOffset(offsetFile, 0);
      env = { LD_PRELOAD: compileClockShim(), [CLOCK_OFFSET_FILE_ENV]: offsetFile };
    }
    const spec: LocalServerSpec = env === undefined ? { dataDir, persistence } : { dataDir, persistence, env };
    const { port, spawned } = await launchOnFreePort(spec);
    return new LocalRedisNode(nodeName(index), port, spawned, dir, spec, offsetFile);
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

class EnvRedisNode implements RedisNodeHandle {
  readonly controllable = false;
  readonly running = true;
  readonly paused = false;
  readonly host: string;
  readonly port: number;

  constructor(
    readonly name: string,
    readonly url: string,
  ) {
    const parsed = new URL(url);
    if (parsed.protocol !== "redis:" && parsed.protocol !== "rediss:") throw new Error(`REDIS_URLS entry is not a redis:// URL: ${url}`);
    this.host = parsed.hostname;
    this.port = parsed.port === "" ? 6379 : Number(parsed.port);
  }

  kill(): Promise<void> {
    return Promise.reject(this.refuse("kill"));
  }
  restart(): Promise<void> {
    return Promise.reject(this.refuse("restart"));
  }
  pause(): void {
    throw this.refuse("pause");
  }
  resume(): void {
    throw this.refuse("resume");
  }
  setClockOffsetMs(): void {
    throw this.refuse("setClockOffsetMs");
  }

  private refuse(what: string): Error {
    return new Error(
      `Redis node ${this.name} (${this.url}) comes from REDIS_URLS and cannot be controlled (${what}); request { faults: true } to get harness-owned nodes`,
    );
  }
}

function envNodes(count: number, raw: string): RedisNodeHandle[] {
  const urls = raw
    .split(",")
    .map((u) => u.trim())
    .filter((u) => u !== "");
  if (urls.length < count) {
    throw new Error(
      `REDIS_URLS lists ${urls.length} endpoint(s) but ${count} are needed; list at least ${count} independent Redis servers, or unset REDIS_URLS to let the harness start them`,
    );
  }
  return urls.slice(0, count).map((url, i) => new EnvRedisNode(nodeName(i), url));
}

/** Starts all nodes in parallel; if any fails, the ones that started are disposed before rethrowing. */
async function startAll(count: number, start: (index: number) => Promise<OwnedRedisNode>): Promise<OwnedRedisNode[]> {
  const results = await Promise.allSettled(Array.from({ length: count }, (_, i) => start(i)));
  const started = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (failed !== undefined) {
    await Promise.allSettled(started.map((n) => n.dispose()));
    throw failed.reason;
  }
  return started;
}

/**
 * Gives `count` independent Redis servers: REDIS_URLS when no faults are needed, else Docker
 * containers when an engine answers (never for clock control, which needs LD_PRELOAD), else local
 * redis-server processes on free loopback ports.
 */
export async function startRedisNodes(count: number, options: StartRedisOptions = {}): Promise<RedisNodes> {
  if (!Number.isInteger(count) || count < 1) throw new Error(`startRedisNodes needs a positive node count, got ${count}`);
  const clockControl = new Set(options.clockControl ?? []);
  for (const index of clockControl) {
    if (!Number.isInteger(index) || index < 0 || index >= count)
      throw new Error(`clockControl index ${index} is not one of the ${count} nodes`);
  }
  const persistence = options.persistence ?? "fsync-always";
  const wantsFaults = options.faults === true || clockControl.size > 0;

  const fromEnv = process.env.REDIS_URLS;
  if (!wantsFaults && fromEnv !== undefined && fromEnv.trim() !== "") {
    const nodes = envNodes(count, fromEnv);
    return { nodes, urls: nodes.map((n) => n.url), source: "env", stop: () => Promise.resolve() };
  }

  let source: "docker" | "local" = "local";
  let owned: OwnedRedisNode[];
  if (clockControl.size === 0 && (await dockerAvailable())) {
    source = "docker";
    owned = await startAll(count, (i) => startDockerRedisNode(nodeName(i), persistence));
  } else {
    requireExecutable("redis-server", "apt-get install redis-server");
    if (clockControl.size > 0) compileClockShim(); // once, before the parallel starts
    owned = await startAll(count, (i) => startLocalNode(i, persistence, clockControl.has(i)));
  }

  let stopping: Promise<void> | undefined;
  return {
    nodes: owned,
    urls: owned.map((n) => n.url),
    source,
    stop: () => {
      stopping ??= Promise.allSettled(owned.map((n) => n.dispose())).then(() => undefined);
      return stopping;
    },
  };
}
