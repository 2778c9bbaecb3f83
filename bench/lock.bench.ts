// Lock benchmark: acquire+release ops/s of @fenced/lock against every Node Redlock library on the
// same 5 local redis-server nodes, in the same run, at concurrency 1 and 16; beside them the floor
// that any Redlock pays (a bare SET NX PX and a compare-and-delete, each resolved at a quorum) with
// two variants that split our cost above it (a script; a second write), and
// a lease of two resources at once, ours against node-redlock's (the one peer that takes a set), and
// ours on each client it takes (iovalkey, node-redis, Valkey GLIDE) beside ioredis. Then two shapes of the quorum:
// 3 nodes, and 5 with one stopped (SIGSTOP), each ours against the peers. Then the heap after
// 100,000 acquire/release cycles against the heap after the first 1,000.
// JSON lines on stdout; the lines with "goal" are the ones the project is judged by.
import { GlideClient } from "@valkey/valkey-glide";
import { Redis } from "ioredis";
import { Redis as Valkey } from "iovalkey";
import { createClient } from "redis";
import { createRedlock, IoredisAdapter } from "redlock-universal";
import { RedlockMutex } from "redis-semaphore";
import type PeerRedlock from "../node_modules/redlock/dist/index.js";
import { fromNodeRedis, fromValkeyGlide, Redlock } from "@fenced/lock";
import { startRedisNodes } from "@fenced/servers";
import { floorLock } from "./lock-floor.js";
import { emit, measure, median, round3, type Op } from "./measure.js";

// node-redlock's package.json "exports" hides its type declarations; borrow them by path.
const NodeRedlock = ((await import("redlock")) as { default: unknown }).default as typeof PeerRedlock;

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 2_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const TTL_MS = 10_000;
const RETRIES = 3;
const OURS = "@fenced/lock";
const FLOOR = "floor";
const PEERS = ["redlock 5.0.0-beta.2", "redlock-universal 0.8.5", "redis-semaphore 5.8.0 RedlockMutex"] as const;
/** Two resources in one lease: `acquire([a, b], ttl)` + release, ours and node-redlock's. */
const OURS_PAIR = "@fenced/lock [a, b]";
const PEER_PAIR = "redlock 5.0.0-beta.2 [a, b]";
/** The floor's SET inside a script, and with an INCR after it (lock-floor.ts): where our cost above the floor goes. */
const FLOOR_SCRIPT = "floor, SET in a script";
const FLOOR_INCR = "floor, SET + INCR in a script";
/** Ours on the other clients it takes (the peers and every other line use ioredis 5). */
const OURS_VALKEY = "@fenced/lock on iovalkey";
const OURS_NODE_REDIS = "@fenced/lock on node-redis";
const OURS_GLIDE = "@fenced/lock on valkey-glide";
/** Ours on each client, each judged against the fastest peer. */
const OURS_CLIENTS = [OURS, OURS_VALKEY, OURS_NODE_REDIS, OURS_GLIDE] as const;
const GOAL = 1.05;
const STRETCH = 1.2;
const CONCURRENCIES = [1, 16];

type Impl =
  | (typeof OURS_CLIENTS)[number]
  | typeof FLOOR
  | typeof FLOOR_SCRIPT
  | typeof FLOOR_INCR
  | (typeof PEERS)[number]
  | typeof OURS_PAIR
  | typeof PEER_PAIR;
/** The lines of a shape of the quorum other than the full one: ours on ioredis and the peers. */
const SHAPE_IMPLS: readonly Impl[] = [OURS, ...PEERS];
/** How many resources each implementation's lease holds. */
const resourcesOf = (impl: Impl): number => (impl === OURS_PAIR || impl === PEER_PAIR ? 2 : 1);

/**
 * One op per implementation: acquire a lease on the worker's own resource, release it. Every
 * implementation has its own five connections to the same five nodes, and is configured alike: no
 * automatic extension, and up to RETRIES retries with its own default delay. Nothing contends (each
 * worker has its own resource), so a retry happens only when nodes stall (an fsync can take longer
 * than @fenced/lock's 200 ms per-node timeout here; the peers have none and wait it out). Each peer
 * is given its cheapest documented usage: lock objects made once per worker where the API allows it.
 * The two-resource pair locks two resources of the worker's own in one lease, ours (one token each)
 * and node-redlock's, on the same Redlock instances as their one-resource lines.
 */
async function implementations(urls: readonly string[], workers: number): Promise<{ ops: Record<Impl, Op>; close: () => void }> {
  const clients: { disconnect(): void }[] = [];
  const connect = (): Redis[] => {
    const mine = urls.map((url) => new Redis(url));
    clients.push(...mine);
    return mine;
  };
  const valkeyClients = urls.map((url) => new Valkey(url));
  clients.push(...valkeyClients);
  const nodeRedisClients = await Promise.all(urls.map((url) => createClient({ url }).connect()));
  clients.push(...nodeRedisClients.map((c) => ({ disconnect: () => c.destroy() })));
  const fencedValkey = new Redlock(valkeyClients, { retryCount: RETRIES });
  const fencedNodeRedis = new Redlock(nodeRedisClients.map(fromNodeRedis), { retryCount: RETRIES });
  const glideClients = await Promise.all(
    urls.map((url) => GlideClient.createClient({ addresses: [{ host: new URL(url).hostname, port: Number(new URL(url).port) }] })),
  );
  clients.push(...glideClients.map((c) => ({ disconnect: () => c.close() })));
  const fencedGlide = new Redlock(glideClients.map(fromValkeyGlide), { retryCount: RETRIES });
  const fenced = new Redlock(connect(), { retryCount: RETRIES });
  const redlock = new NodeRedlock(connect(), { retryCount: RETRIES });
  const universalAdapters = connect().map((c) => new IoredisAdapter(c));
  const universal = Array.from({ length: workers }, (_, w) =>
    createRedlock({ adapters: universalAdapters, key: `bench-universal:${w}`, ttl: TTL_MS, retryAttempts: RETRIES }),
  );
  const semaphoreClients = connect();
  const mutexes = Array.from(
    { length: workers },
    (_, w) =>
      new RedlockMutex(semaphoreClients, `bench-semaphore:${w}`, {
        lockTimeout: TTL_MS,
        acquireAttemptsLimit: RETRIES + 1,
        refreshInterval: 0,
      }),
  );
  const floor = floorLock(connect());
  const floorScript = floorLock(connect(), "script");
  const floorIncr = floorLock(connect(), "script + INCR");
  const ops: Record<Impl, Op> = {
    [OURS]: async (w) => {
      const lease = await fenced.acquire(`bench:${w}`, TTL_MS);
      await lease.release();
    },
    [OURS_VALKEY]: async (w) => {
      const lease = await fencedValkey.acquire(`bench-valkey:${w}`, TTL_MS);
      await lease.release();
    },
    [OURS_NODE_REDIS]: async (w) => {
      const lease = await fencedNodeRedis.acquire(`bench-node-redis:${w}`, TTL_MS);
      await lease.release();
    },
    [OURS_GLIDE]: async (w) => {
      const lease = await fencedGlide.acquire(`bench-glide:${w}`, TTL_MS);
      await lease.release();
    },
    [PEERS[0]]: async (w) => {
      const lock = await redlock.acquire([`bench-redlock:${w}`], TTL_MS);
      await lock.release();
    },
    [PEERS[1]]: async (w) => {
      const lock = universal[w] as (typeof universal)[number];
      const handle = await lock.acquire();
      await lock.release(handle);
    },
    [PEERS[2]]: async (w) => {
      const mutex = mutexes[w] as RedlockMutex;
      await mutex.acquire();
      await mutex.release();
    },
    [OURS_PAIR]: async (w) => {
      const lease = await fenced.acquire([`bench-pair:${w}:a`, `bench-pair:${w}:b`], TTL_MS);
      await lease.release();
    },
    [PEER_PAIR]: async (w) => {
      const lock = await redlock.acquire([`bench-redlock-pair:${w}:a`, `bench-redlock-pair:${w}:b`], TTL_MS);
      await lock.release();
    },
    [FLOOR]: async (w) => {
      const value = await floor.acquire(`bench-floor:${w}`, TTL_MS);
      await floor.release(`bench-floor:${w}`, value);
    },
    [FLOOR_SCRIPT]: async (w) => {
      const value = await floorScript.acquire(`bench-floor-script:${w}`, TTL_MS);
      await floorScript.release(`bench-floor-script:${w}`, value);
    },
    [FLOOR_INCR]: async (w) => {
      const value = await floorIncr.acquire(`bench-floor-incr:${w}`, TTL_MS);
      await floorIncr.release(`bench-floor-incr:${w}`, value);
    },
  };
  return { ops, close: () => clients.forEach((c) => c.disconnect()) };
}

/** A shape of the quorum: how many nodes, and how many of them are stopped (SIGSTOP) while measured. */
interface Shape {
  readonly nodes: number;
  readonly stopped: number;
}
const FULL: Shape = { nodes: 5, stopped: 0 };
const SHAPES: readonly Shape[] = [
  { nodes: 3, stopped: 0 },
  { nodes: 5, stopped: 1 },
];
/** Ours' default per-node timeout: with a node stopped, no acquire+release of ours may wait longer. */
const NODE_TIMEOUT_MS = 200;
/** How long one op may wait for a stopped node before its implementation is reported as waiting for it. */
const STOPPED_WAIT_MS = 5_000;

/** What one op does once nodes are stopped: it finishes, fails, or is still waiting after `ms`. */
async function oneOp(op: Op, ms: number): Promise<"finishes" | "fails" | "waits"> {
  let timer: NodeJS.Timeout | undefined;
  const waiting = new Promise<"waits">((resolve) => {
    timer = setTimeout(() => resolve("waits"), ms);
  });
  const outcome = await Promise.race([
    op(0, 0).then(
      () => "finishes" as const,
      () => "fails" as const,
    ),
    waiting,
  ]);
  clearTimeout(timer);
  return outcome;
}

async function compare(persistence: "fsync-always" | "none", shape: Shape = FULL): Promise<void> {
  const cluster = await startRedisNodes(shape.nodes, { persistence, faults: shape.stopped > 0 });
  const { ops, close } = await implementations(cluster.urls, Math.max(...CONCURRENCIES));
  const full = shape === FULL;
  const at = { persistence, nodes: shape.nodes, stopped: shape.stopped };
  const stopped = cluster.nodes.slice(cluster.nodes.length - shape.stopped);
  try {
    let names = full ? (Object.keys(ops) as Impl[]) : [...SHAPE_IMPLS];
    for (const name of names) await measure(ops[name], Math.max(...CONCURRENCIES), 500); // warm-up: connections, script cache, JIT
    if (stopped.length > 0) {
      for (const node of stopped) node.pause();
      const outcomes = await Promise.all(names.map(async (name) => [name, await oneOp(ops[name], STOPPED_WAIT_MS)] as const));
      for (const [impl, outcome] of outcomes)
        if (outcome !== "finishes") emit({ bench: "lock-stopped-node", ...at, impl, outcome, waitedMs: STOPPED_WAIT_MS });
      names = outcomes.filter(([, outcome]) => outcome === "finishes").map(([name]) => name);
    }
    for (const concurrency of CONCURRENCIES) {
      const rounds: Record<string, number[]> = {};
      const p99s: Record<string, number[]> = {};
      // Interleave the implementations round by round, in a rotating order, so that drift in the
      // machine's load hits all of them alike; judge by the median round of each.
      for (let round = 0; round < ROUNDS; round++) {
        for (let k = 0; k < names.length; k++) {
          const impl = names[(round + k) % names.length] as Impl;
          const r = await measure(ops[impl], concurrency, DURATION_MS);
          emit({ bench: "lock-acquire-release", ...at, impl, resources: resourcesOf(impl), concurrency, round, ...r });
          (rounds[impl] ??= []).push(r.opsPerSec);
          (p99s[impl] ??= []).push(r.p99Ms);
        }
      }
      const medians = Object.fromEntries(names.map((n) => [n, median(rounds[n] ?? [])])) as Record<Impl, number>;
      // With a node stopped, an implementation still waiting was left out (its line says so): ratios only between those that finish.
      const peers = names.includes(OURS) ? PEERS.filter((peer) => names.includes(peer)) : [];
      for (const peer of peers) {
        emit({
          bench: "lock-ratio",
          ...at,
          concurrency,
          ratio: round3(medians[OURS] / medians[peer]),
          ratioOf: `${OURS} ÷ ${peer} (median acquire+release ops/s over ${ROUNDS} rounds)`,
        });
      }
      const fastest = peers.reduce<(typeof PEERS)[number] | undefined>(
        (a, b) => (a !== undefined && medians[a] >= medians[b] ? a : b),
        undefined,
      );
      for (const ours of OURS_CLIENTS.filter((o) => names.includes(o))) {
        if (fastest === undefined) break;
        const ratio = round3(medians[ours] / medians[fastest]);
        emit({
          bench: "lock-ratio",
          ...at,
          concurrency,
          ratio,
          ratioOf: `${ours} ÷ fastest peer (${fastest}), median ops/s, while issuing fencing tokens`,
          ...(full ? { goal: `>= ${GOAL}`, met: ratio >= GOAL, stretch: `>= ${STRETCH}`, stretchMet: ratio >= STRETCH } : {}),
          medians: Object.fromEntries(names.filter((n) => resourcesOf(n) === 1).map((n) => [n, medians[n]])),
        });
      }
      if (stopped.length > 0) {
        // NaN (the goal missed) when ours was left out, still waiting for the stopped node.
        const p99 = median(p99s[OURS] ?? []);
        emit({
          bench: "lock-stopped-node",
          ...at,
          concurrency,
          impl: OURS,
          p99Ms: p99,
          p99Of: `median over ${ROUNDS} rounds of the p99 acquire+release, with ${stopped.length} of ${shape.nodes} nodes stopped`,
          goal: `<= nodeTimeoutMs (${NODE_TIMEOUT_MS} ms): the round never waits for a stopped node past its timeout`,
          met: p99 <= NODE_TIMEOUT_MS,
        });
      }
      if (full) emitFullLines(medians, persistence, concurrency);
    }
  } finally {
    for (const node of stopped) node.resume();
    close();
    await cluster.stop();
  }
}

/** The full shape's further lines: ours against the floor, where our cost above it goes, and the pair. */
function emitFullLines(medians: Record<Impl, number>, persistence: string, concurrency: number): void {
  const at = { persistence, nodes: FULL.nodes, stopped: 0, concurrency };
  emit({
    bench: "lock-floor",
    ...at,
    ratio: round3(medians[OURS] / medians[FLOOR]),
    ratioOf: `${OURS} ÷ floor (bare SET NX PX + compare-and-delete, each at a quorum)`,
  });
  // Where our cost above the floor goes, on the nodes (for information, no goal).
  emit({
    bench: "lock-floor",
    ...at,
    scriptRatio: round3(medians[FLOOR_SCRIPT] / medians[FLOOR]),
    scriptRatioOf: "floor with its SET in a Lua script ÷ floor: what running a script costs",
    incrRatio: round3(medians[FLOOR_INCR] / medians[FLOOR_SCRIPT]),
    incrRatioOf: "floor with SET + INCR in one script ÷ with SET alone in a script: what a second write per acquire costs",
    oursOverIncr: round3(medians[OURS] / medians[FLOOR_INCR]),
    oursOverIncrOf: `${OURS} ÷ floor with SET + INCR in a script: the rest (the client's own work, the token's choice)`,
  });
  emit({
    bench: "lock-ratio",
    ...at,
    resources: 2,
    ratio: round3(medians[OURS_PAIR] / medians[PEER_PAIR]),
    ratioOf: `${OURS} acquire([a, b]) ÷ ${PEERS[0]} acquire([a, b]) (median acquire+release ops/s over ${ROUNDS} rounds)`,
    medians: { [OURS_PAIR]: medians[OURS_PAIR], [PEER_PAIR]: medians[PEER_PAIR] },
  });
}

async function heapAfterCycles(): Promise<void> {
  const cluster = await startRedisNodes(5, { persistence: "none" });
  const clients = cluster.urls.map((url) => new Redis(url));
  const gc = (globalThis as { gc?: () => void }).gc;
  const heap = (): number => {
    gc?.();
    gc?.();
    return process.memoryUsage().heapUsed;
  };
  try {
    const redlock = new Redlock(clients, { retryCount: RETRIES });
    const concurrency = 16;
    let done = 0;
    const cycles = async (total: number): Promise<void> => {
      await Promise.all(
        Array.from({ length: concurrency }, async (_, w) => {
          while (done < total) {
            done++;
            const lease = await redlock.acquire(`heap:${w}`, TTL_MS);
            await lease.release();
          }
        }),
      );
    };
    await cycles(1_000);
    const after1k = heap();
    await cycles(100_000);
    const after100k = heap();
    const growthMB = round3((after100k - after1k) / 2 ** 20);
    emit({
      bench: "lock-heap",
      cycles: done,
      gcExposed: gc !== undefined,
      heapAfter1kMB: round3(after1k / 2 ** 20),
      heapAfter100kMB: round3(after100k / 2 ** 20),
      growthMB,
      goal: "flat (growth < 1 MB)",
      met: gc !== undefined && Math.abs(growthMB) < 1,
    });
  } finally {
    for (const c of clients) c.disconnect();
    await cluster.stop();
  }
}

const only = process.env.BENCH_LOCK_ONLY; // "fsync-always" | "none" | "shapes" | "heap": one part, for profiling
if (only === undefined || only === "fsync-always") await compare("fsync-always");
if (only === undefined || only === "none") await compare("none");
// The other shapes, on the nodes users run (fsync-always): ours on ioredis against the peers.
if (only === undefined || only === "shapes") for (const shape of SHAPES) await compare("fsync-always", shape);
if (only === undefined || only === "heap") await heapAfterCycles();
