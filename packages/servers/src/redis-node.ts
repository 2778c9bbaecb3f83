// What every Redis node of the harness is, whoever started it (a local process, a container, the
// environment): the handle the tests use, the options of a start, and the server arguments they share.
// redis.ts (local processes and the entry point), redis-docker.ts and redis-cluster.ts build on it.

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
export function nodeName(index: number): string {
  return index < 26 ? String.fromCharCode(65 + index) : `N${index}`;
}

/** Server arguments shared by the lock nodes, the docker nodes and the cluster nodes. */
export function persistenceArgs(persistence: RedisPersistence): string[] {
  // RDB snapshots are off either way: they would add an unrelated, timing-dependent way to survive a kill.
  // What PROTOCOL.md requires of lock nodes, spelled out even where it is Redis's default: an fsync
  // skipped during a rewrite, or a counter evicted under memory pressure, loses an acknowledged counter.
  return [
    "--save",
    "",
    "--appendonly",
    persistence === "none" ? "no" : "yes",
    "--appendfsync",
    "always",
    "--no-appendfsync-on-rewrite",
    "no",
    "--maxmemory-policy",
    "noeviction",
  ];
}

/** A node the harness owns; also what the docker and cluster variants build on. */
export interface OwnedRedisNode extends RedisNodeHandle {
  /** Kills the node and removes what it left on disk. */
  dispose(): Promise<void>;
}
