import { setTimeout as sleep } from "node:timers/promises";
import { StaleTokenError, VersionMismatchError, type Fence } from "@fenced/store";
import type { CounterAccess, CounterStore, StoreConnection } from "./counter-store.js";
import { GatewayClient, GatewayRefusedError, RegistrationRefusedError } from "./gateway-client.js";
import { GatewayCounters } from "./gateway-counters.js";
import { headOf, increment, monoSince, type FailReason, type Mode, type OpEvent } from "./history.js";
import { gatewayLeases, NoLeaseError, type LeaseSource, type WorkerLease } from "./lease-source.js";
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
  let leases: LeaseSource;
  let store: CounterAccess;
  /** Fence-on-acquire done by the worker itself ("full" without a gateway; the gateway does it before it answers). */
  let register: ((fence: Fence) => Promise<void>) | undefined;
  // Loaded only where used: a worker that goes through a gateway never loads the lock, nor (unless
  // unfenced) a store client; five of them start in a fraction of the time.
  const direct = async (): Promise<CounterStore> => (await import("./counter-store.js")).openCounterStore(config.store, config.mode);
  if (config.gateway === undefined) {
    leases = (await import("./library-leases.js")).libraryLeases(config.redisUrls, config.nodeTimeoutMs);
    const counters = await direct();
    store = counters;
    if (config.mode === "full") register = (fence) => counters.register(fence);
  } else {
    const client = new GatewayClient(config.gateway.port, config.gateway.apiKey, config.gateway.timeoutMs);
    leases = gatewayLeases(client, config.mode === "full");
    store = config.mode === "unfenced" ? await direct() : new GatewayCounters(client, config.store.backend, config.mode);
  }

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
    let lease: WorkerLease;
    try {
      lease = await leases.acquire(resource, config.ttlMs, stopping.signal);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      if (err instanceof RegistrationRefusedError) {
        // The lock granted a lease with this token; a store refused to register it and the gateway
        // released it at once, without disclosing its holder id. It is an acquisition all the same.
        const token = err.token.toString();
        await emit({ type: "acquired", ...stamp(op, resource), token, holder: null });
        await emit({ type: "fail", ...stamp(op, resource), token, reason: "stale", message });
      } else await emit({ type: "fail", ...stamp(op, resource), reason: err instanceof NoLeaseError ? "lock" : "error", message });
      continue;
    }
    const token = lease.fence.token.toString();
    // The public holder id, never the secret value: the history is written to disk.
    const held = { token, holder: lease.fence.holder };
    await emit({ type: "acquired", ...stamp(op, resource), ...held });
    let writeStart: number | undefined;
    try {
      if (register !== undefined && !lease.registered) await register(lease.fence);
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
      // A gateway that refused the request (a 4xx) wrote nothing, sent or not.
      const reason: FailReason | undefined =
        err instanceof StaleTokenError
          ? "stale"
          : err instanceof VersionMismatchError
            ? "version"
            : writeStart === undefined || err instanceof GatewayRefusedError
              ? "error"
              : undefined;
      const message = err instanceof Error ? err.message : String(err);
      if (reason !== undefined) await emit({ type: "fail", ...stamp(op, resource), ...held, reason, message });
      // The write was sent and failed in an unknown way (a broken connection, a timeout): it may have landed.
      else await emit({ type: "info", ...stamp(op, resource), ...held, message, writeStart: writeStart ?? now() });
    } finally {
      await lease.release().catch(() => undefined);
    }
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
