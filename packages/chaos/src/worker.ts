import type { Fence } from "@fenced/fence";
import type { CounterAccess, CounterStore, StoreConnection } from "./counter-store.js";
import { GatewayClient } from "./gateway-client.js";
import { GatewayCounters } from "./gateway-counters.js";
import { monoSince, type Mode, type OpEvent } from "./history.js";
import { gatewayLeases, type LeaseSource } from "./lease-source.js";
import { runOperation } from "./operation.js";
import { runPairOperation } from "./pair-operation.js";
import { hash32, Random } from "./random.js";

/**
 * A worker process: loops acquire → read the counter → increment → write → release on shared
 * resources, and reports every step to the controller over IPC. It runs in its own process so that
 * the nemesis can SIGSTOP it like a real client stalled by GC, swapping or a slow VM.
 *
 * With `gateway` set it takes its leases from a gateway process over HTTP and, in "ratchet" and
 * "full", reads and writes through it too; in "unfenced" it still writes straight to the store,
 * unchecked, as without a gateway.
 */

export const WORKER_ENV = "FENCED_CHAOS_WORKER";

export interface WorkerConfig {
  readonly worker: number;
  readonly mode: Mode;
  /** Points at this worker's delay proxies, not at the servers. */
  readonly store: StoreConnection;
  /** Through its delay proxies; empty when the leases come from a gateway. */
  readonly redisUrls: readonly string[];
  /** A gateway to take leases from (and, unless "unfenced", to read and write through): its port on 127.0.0.1 (this worker's delay proxy). */
  readonly gateway?: { readonly port: number; readonly apiKey: string; readonly timeoutMs: number };
  /** Per lock node, in the worker's own Redlock. */
  readonly nodeTimeoutMs: number;
  /** The stores' deadline (timeoutMs), and the worker's for acquiring a lease. */
  readonly deadlineMs: number;
  /** resource → counter key */
  readonly counters: Readonly<Record<string, string>>;
  readonly ttlMs: number;
  /** Upper bound of the random "compute" time between read and write. */
  readonly workMs: number;
  readonly seed: number;
  /** Each operation takes one lease of two resources (drawn at random, in random order) and increments both counters (pair-operation.ts). */
  readonly pairs: boolean;
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

/** The worker's leases and store access: its own Redlock and store clients, or a gateway's. */
async function connect(
  config: WorkerConfig,
): Promise<{ leases: LeaseSource; store: CounterAccess; register: ((fence: Fence | readonly Fence[]) => Promise<void>) | undefined }> {
  // Loaded only where used: a worker that goes through a gateway never loads the lock, nor (unless
  // unfenced) a store client; five of them start in a fraction of the time.
  const direct = async (): Promise<CounterStore> =>
    await (await import("./counter-store.js")).openCounterStore(config.store, config.mode, { timeoutMs: config.deadlineMs });
  if (config.gateway === undefined) {
    const leases = (await import("./library-leases.js")).libraryLeases(config.redisUrls, config.nodeTimeoutMs);
    const counters = await direct();
    return { leases, store: counters, register: config.mode === "full" ? (fence) => counters.register(fence) : undefined };
  }
  const client = new GatewayClient(config.gateway.port, config.gateway.apiKey, config.gateway.timeoutMs);
  const leases = gatewayLeases(client, config.mode === "full");
  const store = config.mode === "unfenced" ? await direct() : new GatewayCounters(client, config.store.backend, config.mode);
  // Through a gateway, "full" registers on acquire: the gateway does it before it answers.
  return { leases, store, register: undefined };
}

async function main(config: WorkerConfig): Promise<void> {
  let origin = process.hrtime.bigint();
  const now = (): number => monoSince(origin);
  const rnd = new Random(hash32(config.seed ^ Math.imul(config.worker + 1, 0x9e3779b1)));
  const resources = Object.keys(config.counters);
  const { leases, store, register } = await connect(config);

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

  const betweenReadAndWrite = async (): Promise<void> => {
    if (armed === undefined) return;
    const { fault, until } = armed;
    armed = undefined;
    if (now() > until) return;
    // Waiting for "continue" (not stopping itself) makes the write wait for the end of the pause
    // however the controller's SIGSTOP and SIGCONT race with this process's own steps.
    const resumed = new Promise<void>((resolve) => (proceed = resolve));
    await send({ type: "between-read-and-write", worker: config.worker, fault, mono: now() });
    await resumed;
    proceed = undefined;
  };
  const context = {
    worker: config.worker,
    leases,
    store,
    register,
    ttlMs: config.ttlMs,
    acquireDeadlineMs: config.deadlineMs,
    workMs: config.workMs,
    rnd,
    now,
    stopping: stopping.signal,
    emit: (event: OpEvent) => send({ type: "event", event }),
    betweenReadAndWrite,
  };
  for (let seq = 0; !stopping.signal.aborted; seq++) {
    const op = `${config.worker}.${seq}`;
    if (config.pairs) {
      // Two distinct resources in random order: every ordered pair as likely, so sets overlap and come in both orders.
      const pair = rnd.shuffle(resources).slice(0, 2);
      await runPairOperation(
        context,
        op,
        pair,
        pair.map((r) => config.counters[r] ?? r),
      );
      continue;
    }
    const resource = rnd.pick(resources);
    await runOperation(context, op, resource, config.counters[resource] ?? resource);
  }

  await store.close().catch(() => undefined);
  leases.close();
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
