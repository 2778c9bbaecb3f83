// Lock benchmark: acquire+release ops/s for @fenced/lock and node-redlock on the same 5 local
// redis-server nodes, at concurrency 1 and 16, in the same run; then the heap after 100,000
// acquire/release cycles against the heap after the first 1,000. JSON lines on stdout.
import { Redis } from "ioredis";
import type PeerRedlock from "../node_modules/redlock/dist/index.js";
import { Redlock } from "@fenced/lock";
import { startRedisNodes } from "@fenced/servers";
import { emit, measure, type Op } from "./measure.js";

// node-redlock's package.json "exports" hides its type declarations; borrow them by path.
const NodeRedlock = ((await import("redlock")) as { default: unknown }).default as typeof PeerRedlock;

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 3_000);
const ROUNDS = 3;

async function compare(persistence: "fsync-always" | "none"): Promise<void> {
  const cluster = await startRedisNodes(5, { persistence });
  const ours = cluster.urls.map((url) => new Redis(url));
  const theirs = cluster.urls.map((url) => new Redis(url));
  try {
    const fenced = new Redlock(ours, { retryCount: 0 });
    const peer = new NodeRedlock(theirs, { retryCount: 0 });
    const impls: Record<string, Op> = {
      "@fenced/lock": async (w) => {
        const lease = await fenced.acquire(`bench:${w}`, 10_000);
        await lease.release();
      },
      redlock: async (w) => {
        const lock = await peer.acquire([`bench-peer:${w}`], 10_000);
        await lock.release();
      },
    };
    for (const concurrency of [1, 16]) {
      const best: Record<string, number> = {};
      // Alternate the two implementations so that drift in the machine's load hits both alike.
      for (let round = 0; round < ROUNDS; round++) {
        for (const [impl, op] of Object.entries(impls)) {
          await measure(op, concurrency, 300); // warm-up: connections, script cache, JIT
          const r = await measure(op, concurrency, DURATION_MS);
          emit({ bench: "lock-acquire-release", persistence, impl, concurrency, round, ...r });
          best[impl] = Math.max(best[impl] ?? 0, r.opsPerSec);
        }
      }
      const ratio = (best["@fenced/lock"] ?? 0) / (best.redlock ?? 1);
      emit({ bench: "lock-acquire-release", persistence, concurrency, ratio: Number(ratio.toFixed(3)), ratioOf: "@fenced/lock ops/s ÷ redlock ops/s (best round each)", goal: 1.0 });
    }
  } finally {
    for (const c of [...ours, ...theirs]) c.disconnect();
    await cluster.stop();
  }
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
    const redlock = new Redlock(clients, { retryCount: 0 });
    const concurrency = 16;
    let done = 0;
    const cycles = async (total: number): Promise<void> => {
      await Promise.all(
        Array.from({ length: concurrency }, async (_, w) => {
          while (done < total) {
            done++;
            const lease = await redlock.acquire(`heap:${w}`, 10_000);
            await lease.release();
          }
        }),
      );
    };
    await cycles(1_000);
    const after1k = heap();
    await cycles(100_000);
    const after100k = heap();
    emit({
      bench: "lock-heap",
      cycles: done,
      gcExposed: gc !== undefined,
      heapAfter1kMB: Number((after1k / 2 ** 20).toFixed(2)),
      heapAfter100kMB: Number((after100k / 2 ** 20).toFixed(2)),
      growthMB: Number(((after100k - after1k) / 2 ** 20).toFixed(2)),
    });
  } finally {
    for (const c of clients) c.disconnect();
    await cluster.stop();
  }
}

await compare("fsync-always");
await compare("none");
await heapAfterCycles();
