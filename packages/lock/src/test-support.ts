// Shared by the lock's tests (not part of the published build: see tsconfig.build.json).
import { performance } from "node:perf_hooks";
import { Redis } from "ioredis";
import { Redis as Redis6 } from "ioredis-6";
import { Redis as Valkey } from "iovalkey";
import { createClient as createNodeRedis5 } from "redis";
import { createClient as createNodeRedis6 } from "redis-6";
import { Decoder, GlideClient, Logger as GlideLogger } from "@valkey/valkey-glide";
import { startRedisNodes, type RedisNodeHandle, type RedisNodes, type StartRedisOptions } from "@fenced/servers";
import type { RedisClient } from "./client.js";
import type { Lease } from "./lease.js";
import { fromNodeRedis } from "./node-redis.js";
import { fromValkeyGlide } from "./valkey-glide.js";
import { resourceKeys } from "./keys.js";
import { SCRIPTS } from "./scripts.js";

/** ioredis is a peer dependency, 5 or 6: the lock's clients in a test come from either major. */
export type IoredisMajor = 5 | 6;
export const IOREDIS_MAJORS: readonly IoredisMajor[] = [5, 6];
/**
 * Every client the lock takes: ioredis 5 and 6 and iovalkey (Valkey's fork of ioredis 5) as they
 * are, node-redis 5 and 6 through fromNodeRedis, Valkey GLIDE through fromValkeyGlide.
 */
export type ClientKind = `ioredis ${IoredisMajor}` | "iovalkey" | `node-redis ${5 | 6}` | "valkey-glide";
export const CLIENT_KINDS: readonly ClientKind[] = ["ioredis 5", "ioredis 6", "iovalkey", "node-redis 5", "node-redis 6", "valkey-glide"];

/** The kinds of the ioredis family, whose clients have `pipeline()` (pipelining.ts). */
export const PIPELINE_KINDS: readonly ClientKind[] = ["ioredis 5", "ioredis 6", "iovalkey"];

/**
 * What a client tells the lock beyond its replies: `replyCodes`, an error reply's code (NOSCRIPT,
 * WRONGTYPE); `connectionEvents`, its connection's errors and state (node-watch.ts). GLIDE has neither.
 */
export function clientTraits(kind: ClientKind): { readonly replyCodes: boolean; readonly connectionEvents: boolean } {
  const glide = kind === "valkey-glide";
  return { replyCodes: !glide, connectionEvents: !glide };
}

/** A client of either major as the tests use it: what the lock needs, and what the tests call on it. */
export interface LockClient extends RedisClient {
  readonly status: string;
  ping(): Promise<string>;
  on(event: "error", listener: (err: Error) => void): unknown;
  connect(): Promise<void>;
  disconnect(): void;
}

export interface ClientSettings {
  /** Which client the lock's clients are. Default ioredis 5. Inspection clients (admin) are always ioredis 5. */
  readonly client?: ClientKind;
  /**
   * A killed node errors at once instead of queueing commands until it is back: no offline queue,
   * no retries of in-flight commands. A paused node still accepts the
   * commands (its socket stays open) and runs them when it resumes.
   */
  readonly failFast?: boolean;
  /** Client-side timeout; the command is still sent and may run later. */
  readonly commandTimeout?: number;
}

export async function connect(node: RedisNodeHandle, settings?: ClientSettings & { readonly client?: "ioredis 5" }): Promise<Redis>;
export async function connect(node: RedisNodeHandle, settings: ClientSettings): Promise<LockClient>;
export async function connect(node: RedisNodeHandle, settings: ClientSettings = {}): Promise<LockClient> {
  if (settings.client === "node-redis 5" || settings.client === "node-redis 6") return connectNodeRedis(node, settings);
  if (settings.client === "valkey-glide") return connectGlide(node, settings);
  const options = {
    host: node.host,
    port: node.port,
    lazyConnect: true,
    // Reconnect quickly after a node restart (the default backs off up to 2 s).
    retryStrategy: () => 20,
    ...(settings.failFast === true ? { enableOfflineQueue: false, maxRetriesPerRequest: 0 } : {}),
    ...(settings.commandTimeout === undefined ? {} : { commandTimeout: settings.commandTimeout }),
  };
  const redis: LockClient =
    settings.client === "ioredis 6" ? new Redis6(options) : settings.client === "iovalkey" ? new Valkey(options) : new Redis(options);
  // Killed nodes make clients emit connection errors; the tests look at command results instead.
  redis.on("error", () => undefined);
  await redis.connect();
  return redis;
}

/** A node-redis client through the lock's adapter, with the test's connect and disconnect beside it. */
async function connectNodeRedis(node: RedisNodeHandle, settings: ClientSettings): Promise<LockClient> {
  if (settings.commandTimeout !== undefined) throw new Error("node-redis clients here take no command timeout");
  const options = {
    socket: { host: node.host, port: node.port, reconnectStrategy: () => 20 },
    ...(settings.failFast === true ? { disableOfflineQueue: true } : {}),
  };
  const client = settings.client === "node-redis 6" ? createNodeRedis6(options) : createNodeRedis5(options);
  client.on("error", () => undefined);
  const lockClient = Object.assign(fromNodeRedis(client), {
    connect: async () => {
      await client.connect();
    },
    disconnect: () => {
      if (client.isOpen) client.destroy();
    },
  });
  await lockClient.connect();
  return lockClient as LockClient;
}

/**
 * A GLIDE client through the lock's adapter. GLIDE connects when it is made and has no connection
 * state or events: `status` reads "ready" and `on` listens to nothing (the tests wait for it with ping).
 */
async function connectGlide(node: RedisNodeHandle, settings: ClientSettings): Promise<LockClient> {
  // GLIDE logs each error reply a test provokes (a NOSCRIPT) as a warning on stdout.
  GlideLogger.init("error");
  const client = await GlideClient.createClient({
    addresses: [{ host: node.host, port: node.port }],
    // Bytes by default: the adapter must ask for strings itself (a counter past 2^52 is read as one).
    defaultDecoder: Decoder.Bytes,
    ...(settings.commandTimeout === undefined ? {} : { requestTimeout: settings.commandTimeout }),
  });
  let closed = false;
  const lockClient = Object.assign(fromValkeyGlide(client), {
    status: "ready",
    on: () => lockClient,
    connect: () => Promise.resolve(),
    disconnect: () => {
      if (!closed) client.close();
      closed = true;
    },
  });
  return lockClient as unknown as LockClient;
}

export interface TestNodes {
  readonly set: RedisNodes;
  readonly nodes: readonly RedisNodeHandle[];
  /** One client per node, for the lock under test, from the ioredis major the settings ask for. */
  readonly clients: LockClient[];
  /** One more client per node, for looking at what the lock left on the servers. */
  readonly admin: Redis[];
  /** Another client per node (for a second lock user; same major as `clients` unless asked); disconnected by stop(). */
  moreClients(settings?: ClientSettings): Promise<LockClient[]>;
  /** Disconnects every client and stops the servers. */
  stop(): Promise<void>;
}

export async function startTestNodes(count: number, options: StartRedisOptions = {}, settings: ClientSettings = {}): Promise<TestNodes> {
  const set = await startRedisNodes(count, options);
  const opened: LockClient[] = [];
  const open = async <C extends LockClient>(make: (node: RedisNodeHandle) => Promise<C>): Promise<C[]> => {
    const clients = await Promise.all(set.nodes.map(make));
    opened.push(...clients);
    return clients;
  };
  const moreClients = (s: ClientSettings = {}): Promise<LockClient[]> =>
    open((node) => connect(node, { client: settings.client ?? "ioredis 5", ...s }));
  try {
    const clients = await moreClients(settings);
    const admin = await open((node) => connect(node));
    return {
      set,
      nodes: set.nodes,
      clients,
      admin,
      moreClients,
      stop: async () => {
        for (const client of opened) client.disconnect();
        await set.stop();
      },
    };
  } catch (err) {
    for (const client of opened) client.disconnect();
    await set.stop();
    throw err;
  }
}

/** The resource's fence counter on one node (0 when the key does not exist). */
export async function counterOn(redis: Redis, resource: string): Promise<bigint> {
  return BigInt((await redis.get(resourceKeys(resource).counter)) ?? "0");
}

export function countersOn(redises: readonly Redis[], resource: string): Promise<bigint[]> {
  return Promise.all(redises.map((r) => counterOn(r, resource)));
}

/** The value of the resource's lease key on each node (null where there is none). */
export function leaseValuesOn(redises: readonly Redis[], resource: string): Promise<(string | null)[]> {
  return Promise.all(redises.map((r) => r.get(resourceKeys(resource).lease)));
}

/** Sets the lease key on a node as another client would hold it. */
export async function holdAs(redis: Redis, resource: string, value: string, ttlMs: number): Promise<void> {
  await redis.set(resourceKeys(resource).lease, value, "PX", ttlMs);
}

/** Resolves once the client is connected and ready again (after a node restart). */
export async function ready(redis: LockClient, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (redis.status !== "ready") {
    if (Date.now() > deadline) throw new Error(`client did not become ready within ${timeoutMs} ms (status ${redis.status})`);
    await new Promise((r) => setTimeout(r, 5));
  }
  // A client without connection state (GLIDE) is ready once it answers.
  for (;;) {
    const answered = await redis.ping().then(
      () => true,
      () => false,
    );
    if (answered) return;
    if (Date.now() > deadline) throw new Error(`client did not answer within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * Resolves once the client has had a connection attempt refused: its node is down, and the lock
 * (which watches the client's connection errors) knows it. Call it before the kill: with the tests'
 * retry strategy the first refusal follows within milliseconds.
 */
export function refusedReconnect(client: LockClient): Promise<void> {
  const emitter = client as unknown as NodeJS.EventEmitter;
  return new Promise((resolve) => {
    const onError = (err: Error & { code?: unknown }): void => {
      if (err.code !== "ECONNREFUSED") return;
      emitter.removeListener("error", onError);
      resolve();
    };
    emitter.on("error", onError);
  });
}

export function maxOf(values: readonly bigint[]): bigint {
  return values.reduce((a, b) => (b > a ? b : a), -1n);
}

/**
 * Loads the lock's scripts on a node, as a node that has served the lock for a while has them.
 * Tests that count on exact counter values use it after a restart: on a node with an empty script
 * cache a call costs an extra round trip (NOSCRIPT, then EVAL), so that node may answer after an
 * attempt was decided, and miss it.
 */
export async function loadScripts(redis: Redis): Promise<void> {
  await Promise.all(Object.values(SCRIPTS).map((script) => redis.script("LOAD", script.source)));
}

/**
 * Resolves once the servers have run every command sent on these connections so far (a connection's
 * commands run in order). release() and acquire() return once a majority answered; tests that then
 * look at every node wait for the rest with this. Exact only while no NOSCRIPT fallback is pending:
 * load the scripts first (loadScripts).
 */
export async function drained(clients: readonly RedisClient[]): Promise<void> {
  await Promise.all(clients.map((c) => c.ping()));
}

/** Which the nodes run first when a release follows an extension that is under way. */
export type Order = "extension first" | "release first";
export const ORDERS: readonly Order[] = ["extension first", "release first"];

/**
 * Makes the next extension reach the nodes after whatever is sent right after it ("release first"):
 * with every script cached but EXTEND, its EVALSHA is answered NOSCRIPT and its EVAL goes out behind
 * the release (a connection's commands run in order), as it does on a node whose script cache was
 * emptied. "extension first": every script cached, so the nodes run them in the order sent.
 */
export async function nodesRun(order: Order, admin: readonly Redis[]): Promise<void> {
  await Promise.all(
    admin.map(async (redis) => {
      await redis.script("FLUSH");
      if (order === "extension first") await loadScripts(redis);
      else await Promise.all([SCRIPTS.acquire, SCRIPTS.publish, SCRIPTS.release].map((s) => redis.script("LOAD", s.source)));
    }),
  );
}

/** The lease signal's reason once it aborts, or "still valid" if it has not aborted within `withinMs`. */
export function lossOf(lease: Lease, withinMs: number): Promise<{ reason: unknown; at: number } | "still valid"> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve("still valid"), withinMs);
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve({ reason: lease.signal.reason, at: performance.now() });
    };
    if (lease.signal.aborted) onAbort();
    else lease.signal.addEventListener("abort", onAbort, { once: true });
  });
}
