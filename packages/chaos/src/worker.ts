import { setTimeout as sleep } from "node:timers/promises";
import { LockNotAcquiredError, Redlock, type Lease } from "@fenced/lock";
import { StaleTokenError, VersionMismatchError } from "@fenced/store";
import { Redis } from "ioredis";
import { openCounterStore, type StoreConnection } from "./counter-store.js";
import { headOf, increment, monoSince, type FailReason, type Mode, type OpEvent } from "./history.js";
import { hash32, Random } from "./random.js";

/**
 * A worker process: loops acquire → read the counter → increment → write → release on shared
 * resources, and reports every step to the controller over IPC. It runs in its own process so that
 * the nemesis can SIGSTOP it like a real client stalled by GC, swapping or a slow VM.
 */

export const WORKER_ENV = "FENCED_CHAOS_WORKER";

export interface WorkerConfig {
  readonly worker: number;
  readonly mode: Mode;
  /** Points at this worker's delay proxies, not at the servers. */
  readonly store: StoreConnection;
  readonly redisUrls: readonly string[];
  /** resource → counter key */
  readonly counters: Readonly<Record<string, string>>;
  readonly ttlMs: number;
  /** Upper bound of the random "compute" time between read and write. */
  readonly workMs: number;
  readonly seed: number;
}

export type ToWorker =
  /** Start; `origin` (a controller process.hrtime.bigint(), decimal) is time 0 of the run's history. */
  | { readonly type: "go"; readonly origin: string }
  | { readonly type: "stop" }
  /**
   * Between your next read and write, if you get there before `until` (run ms), report it and wait
   * for "continue": the controller SIGSTOPs you there and sends "continue" before its SIGCONT.
   */
  | { readonly type: "arm"; readonly fault: number; readonly until: number }
  | { readonly type: "continue"; readonly fault: number };

export type FromWorker =
  | { readonly type: "ready" }
  | { readonly type: "event"; readonly event: OpEvent }
  | { readonly type: "between-read-and-write"; readonly worker: number; readonly fault: number; readonly mono: number }
  | { readonly type: "done" };

function send(message: FromWorker): Promise<void> {
  return new Promise((resolve) => {
    // The controller gone means the run is over: there is nobody to report to.
    if (process.send === undefined || !process.connected) process.exit(0);
    process.send(message, undefined, {}, () => resolve());
  });
}

async function main(config: WorkerConfig): Promise<void> {
  let origin = process.hrtime.bigint();
  const now = (): number => monoSince(origin);
  const rnd = new Random(hash32(config.seed ^ Math.imul(config.worker + 1, 0x9e3779b1)));
  const resources = Object.keys(config.counters);
  const redises = config.redisUrls.map((url) => {
    const client = new Redis(url, {
      // Reconnect fast after a node restarts; the lock's nodeTimeoutMs bounds each command anyway.
      retryStrategy: (times) => Math.min(20 * times, 200),
      maxRetriesPerRequest: 5,
    });
    client.on("error", () => undefined);
    return client;
  });
  const redlock = new Redlock(redises, { retryCount: Infinity, retryDelayMs: 15, retryJitterMs: 30, nodeTimeoutMs: 150 });
  const store = openCounterStore(config.store, config.mode);

  let armed: { fault: number; until: number } | undefined;
  let proceed: (() => void) | undefined;
  const stopping = new AbortController();
  let go: () => void = () => undefined;
  const started = new Promise<void>((resolve) => (go = resolve));
  process.on("message", (message: ToWorker) => {
    if (message.type === "go") {
      origin = BigInt(message.origin);
      go();
    } else if (message.type === "arm") armed = { fault: message.fault, until: message.until };
    else {
      if (message.type === "stop") stopping.abort();
      proceed?.();
    }
  });
  await send({ type: "ready" });
  await started;

  const stamp = (op: string, resource: string): { op: string; worker: number; resource: string; mono: number; wall: number } => ({
    op,
    worker: config.worker,
    resource,
    mono: now(),
    wall: Date.now(),
  });
  const emit = (event: OpEvent): Promise<void> => send({ type: "event", event });

  for (let seq = 0; !stopping.signal.aborted; seq++) {
    const op = `${config.worker}.${seq}`;
    const resource = rnd.pick(resources);
    const key = config.counters[resource] ?? resource;
    await emit({ type: "invoke", ...stamp(op, resource) });
    let lease: Lease;
    try {
      lease = await redlock.acquire(resource, config.ttlMs, { signal: stopping.signal });
    } catch (err) {
      const message = err instanceof LockNotAcquiredError ? err.message : stopping.signal.aborted ? "run stopped while acquiring" : String(err);
      await emit({ type: "fail", ...stamp(op, resource), reason: "lock", message });
      continue;
    }
    const token = lease.token.toString();
    // The public holder id, never the secret value: the history is written to disk.
    const held = { token, holder: lease.holder };
    await emit({ type: "acquired", ...stamp(op, resource), ...held });
    let writeStart: number | undefined;
    try {
      if (config.mode === "full") await store.register(lease);
      const { doc, version } = await store.read(key);
      await emit({ type: "read", ...stamp(op, resource), token, count: doc.count, head: headOf(doc) });
      await sleep(rnd.between(0, config.workMs));
      if (armed !== undefined) {
        const { fault, until } = armed;
        armed = undefined;
        if (now() <= until) {
          // Waiting for "continue" (not stopping itself) makes the write wait for the end of the pause
          // however the controller's SIGSTOP and SIGCONT race with this process's own steps.
          const resumed = new Promise<void>((resolve) => (proceed = resolve));
          await send({ type: "between-read-and-write", worker: config.worker, fault, mono: now() });
          await resumed;
          proceed = undefined;
        }
      }
      const next = increment(doc, op, token);
      writeStart = now();
      await store.write(key, next, lease, version);
      await emit({ type: "ok", ...stamp(op, resource), ...held, read: doc.count, wrote: next.count, writeStart });
    } catch (err) {
      const reason: FailReason | undefined =
        err instanceof StaleTokenError ? "stale" : err instanceof VersionMismatchError ? "version" : writeStart === undefined ? "error" : undefined;
      const message = err instanceof Error ? err.message : String(err);
      if (reason !== undefined) await emit({ type: "fail", ...stamp(op, resource), ...held, reason, message });
      // The write was sent and failed in an unknown way (a broken connection, a timeout): it may have landed.
      else await emit({ type: "info", ...stamp(op, resource), ...held, message, writeStart: writeStart ?? now() });
    } finally {
      await lease.release().catch(() => undefined);
    }
  }

  await store.close().catch(() => undefined);
  redises.forEach((r) => r.disconnect());
  await send({ type: "done" });
  process.disconnect();
}

const raw = process.env[WORKER_ENV];
if (raw !== undefined) {
  main(JSON.parse(raw) as WorkerConfig).catch((err: unknown) => {
    process.stderr.write(`chaos worker failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  });
}
