import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CLOCK_OFFSET_FILE_ENV, compileClockShim, writeClockOffset } from "./clock-shim.js";
import { dockerAvailable } from "./docker.js";
import { freePort } from "./ports.js";
import { killHard, requireExecutable, spawnTracked, waitFor, type Spawned } from "./processes.js";
import { redisReady } from "./redis-probe.js";
import { startDockerRedisNode } from "./redis-docker.js";

export interface RedisNodeHandle {
  /** "A", "B", "C", ... in start order. */
  readonly name: string;
  readonly host: string;
  readonly port: number;
  /** redis://host:port (for env endpoints: the URL as given). */
  readonly url: string;
  /** false for endpoints from REDIS_URLS: the harness does not own them, every fault method throws. */
  readonly controllable: boolean;
  /** The server process (or container) is alive: not killed. */
  readonly running: boolean;
  readonly paused: boolean;
  /** SIGKILL; resolves once the process has exited. */
  kill(): Promise<void>;
  /** Kills if running, then starts again on the same port; keepData (default true) keeps the data dir. Resolves once PING answers. */
  restart(options?: { keepData?: boolean }): Promise<void>;
  /** SIGSTOP: the server keeps its connections but answers nothing. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** Shifts this node's wall clock (only nodes started with clockControl). Takes effect within ~1 ms and survives restarts. */
  setClockOffsetMs(ms: number): void;
}

export interface RedisNodes {
  readonly nodes: readonly RedisNodeHandle[];
  readonly urls: readonly string[];
  readonly source: "env" | "docker" | "local";
  /** Kills everything and removes temp dirs; idempotent. Env endpoints are left untouched. */
  stop(): Promise<void>;
}

export interface StartRedisOptions {
  /** needs kill/restart/pause: never use env endpoints then (env endpoints are used only when faults are not needed) */
  faults?: boolean;
  /** indexes of nodes started with the clock shim (implies faults, local processes) */
  clockControl?: readonly number[];
  /** default "fsync-always": appendonly yes + appendfsync always (what PROTOCOL.md requires of lock nodes); "none": no persistence at all (for tests showing what happens without it) */
  persistence?: "fsync-always" | "none";
}

export type RedisPersistence = NonNullable<StartRedisOptions["persistence"]>;

export const LOOPBACK = "127.0.0.1";
const START_TIMEOUT_MS = 20_000;

export function nodeName(index: number): string {
  return index < 26 ? String.fromCharCode(65 + index) : `N${index}`;
}

/** Server arguments shared by the lock nodes, the docker nodes and the cluster nodes. */
export function persistenceArgs(persistence: RedisPersistence): string[] {
  // RDB snapshots are off either way: they would add an unrelated, timing-dependent way to survive a kill.
  // What PROTOCOL.md requires of lock nodes, spelled out even where it is Redis's default: an fsync
  // skipped during a rewrite, or a counter evicted under memory pressure, loses an acknowledged counter.
  return ["--save", "", "--appendonly", persistence === "none" ? "no" : "yes", "--appendfsync", "always", "--no-appendfsync-on-rewrite", "no", "--maxmemory-policy", "noeviction"];
}

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
    "--port", String(port), "--bind", LOOPBACK, "--protected-mode", "no", "--daemonize", "no",
    "--logfile", "", "--dir", spec.dataDir, ...persistenceArgs(spec.persistence), ...(spec.extraArgs ?? []),
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
export async function launchOnFreePort(spec: LocalServerSpec, pickPort: () => Promise<number> = freePort): Promise<{ port: number; spawned: Spawned }> {
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
async function relaunchOnPort(port: number, spec: LocalServerSpec): Promise<Spawned> {
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

/** A node the harness owns; also what the docker and cluster variants build on. */
export interface OwnedRedisNode extends RedisNodeHandle {
  /** Kills the node and removes what it left on disk. */
  dispose(): Promise<void>;
}

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

  pause(): void {
    this.signal("SIGSTOP");
    this.pausedNow = true;
  }

  resume(): void {
    this.signal("SIGCONT");
    this.pausedNow = false;
  }

  setClockOffsetMs(ms: number): void {
    if (this.offsetFile === undefined) {
      throw new Error(`Redis node ${this.name} was not started with clock control; pass its index in startRedisNodes(n, { clockControl: [...] })`);
    }
    writeClockOffset(this.offsetFile, ms);
  }

  async dispose(): Promise<void> {
    await this.kill();
    await rm(this.dir, { recursive: true, force: true });
  }

  private signal(signal: NodeJS.Signals): void {
    const pid = this.spawned?.child.pid;
    if (!this.running || pid === undefined) throw new Error(`Redis node ${this.name} is not running`);
    process.kill(pid, signal);
  }
}

/** A fresh temp dir for one server: data in <dir>/data, clock offset (if any) beside it, so wiping data keeps the offset. */
export async function makeServerDir(prefix: string): Promise<{ dir: string; dataDir: string }> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  const dataDir = join(dir, "data");
  await mkdir(dataDir);
  return { dir, dataDir };
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
    return new Error(`Redis node ${this.name} (${this.url}) comes from REDIS_URLS and cannot be controlled (${what}); request { faults: true } to get harness-owned nodes`);
  }
}

function envNodes(count: number, raw: string): RedisNodeHandle[] {
  const urls = raw.split(",").map((u) => u.trim()).filter((u) => u !== "");
  if (urls.length < count) {
    throw new Error(`REDIS_URLS lists ${urls.length} endpoint(s) but ${count} are needed; list at least ${count} independent Redis servers, or unset REDIS_URLS to let the harness start them`);
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
    if (!Number.isInteger(index) || index < 0 || index >= count) throw new Error(`clockControl index ${index} is not one of the ${count} nodes`);
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
