import { setTimeout as sleep } from "node:timers/promises";
import { startRedisNodes, type RedisNodes } from "@fenced/servers";
import { check, type CheckResult } from "./checker.js";
import { INLINE_LIMIT, openCounterStore, type CounterStore, type StoreConnection } from "./counter-store.js";
import { DelayProxy } from "./delay-proxy.js";
import { FaultInjector, type FaultTargets } from "./fault-injector.js";
import { GatewayProcess, newApiKey } from "./gateway-process.js";
import { monoSince, noFaults, type Backend, type FaultKind, type HistoryEvent, type Mode, type Via } from "./history.js";
import { faultSchedule, type Link, type ScheduleOptions } from "./nemesis.js";
import { RunEnd } from "./run-end.js";
import { throughProxy, type StoreServer } from "./store-server.js";
import type { FromWorker, WorkerConfig } from "./worker.js";
import { killWorkersOnExit, WorkerHandle } from "./workers.js";

export interface RunOptions {
  readonly mode: Mode;
  readonly store: StoreServer;
  /** "gateway": the workers take leases (and, unless unfenced, read and write) through a gateway process. */
  readonly via: Via;
  /** Stop once this many operations have completed (any outcome), and not before what the run is judged on has played out (RunEnd). */
  readonly ops: number;
  readonly seed: number;
  readonly ttlMs: number;
  readonly workers: number;
  readonly resources: number;
  readonly redisNodes: number;
  readonly workMs: number;
  /** Every operation is a pair: one lease of two resources, a counter incremented under each (pair-operation.ts); `ops` counts pairs. */
  readonly pairs: boolean;
  /** The stores' deadline (timeoutMs, in the workers and in the gateway), and the workers' for acquiring a lease. */
  readonly deadlineMs: number;
  /** What liveness allows an answer beyond the deadline. */
  readonly livenessMarginMs: number;
  /** Give up (and fail the run) if the operations are not done by then. */
  readonly timeoutMs: number;
  readonly log: (line: string) => void;
}

export interface RunResult {
  readonly mode: Mode;
  readonly backend: Backend;
  readonly durationMs: number;
  readonly timedOut: boolean;
  /** Worker and gateway processes that died during the run: each one a violation. */
  readonly deaths: readonly string[];
  /** What else makes the run prove less than it should: workers that had to be killed, faults that could not be undone. */
  readonly problems: readonly string[];
  readonly faults: Readonly<Record<FaultKind, number>>;
  readonly faultsMissed: number;
  readonly history: readonly HistoryEvent[];
  readonly check: CheckResult;
}

/** The one Redis node whose wall clock the nemesis moves. */
const CLOCK_NODE = 0;
/** Per lock node, in the workers' Redlock and in the gateway's. */
const NODE_TIMEOUT_MS = 150;
/** A worker's request to the gateway that has no answer by then fails; far beyond any deadline, so that liveness sees a gateway that does not answer. */
const GATEWAY_TIMEOUT_MS = 10_000;
/** A worker that has not finished its operation this long after "stop" is killed. */
const STOP_TIMEOUT_MS = 30_000;

interface WorkerLinks {
  readonly store: DelayProxy;
  readonly redis: readonly DelayProxy[];
  readonly gateway: DelayProxy | undefined;
}

/**
 * One configuration against one backend: fresh Redis nodes, a fresh store namespace, a delay proxy
 * per worker and server, the workers, the nemesis on the seeded schedule; then heal everything,
 * stop the workers, read the counters directly (not through the proxies) and check the history.
 *
 * Through a gateway, the gateway process talks to the Redis nodes directly and to the store through
 * a proxy of its own, and each worker reaches it through a delay proxy of its own: a delay the
 * schedule puts on a worker's link to a Redis node or to the store holds back its traffic to the
 * gateway instead, a reset of a worker's store link resets the gateway's connections to the store
 * (in "unfenced", whose writes still go straight to the store, the store link stays the worker's).
 */
export async function runConfiguration(options: RunOptions): Promise<RunResult> {
  const run = new ConfigurationRun(options);
  try {
    await run.setUp();
    await run.startWorkers();
    const outcome = await run.drive();
    return await run.conclude(outcome);
  } finally {
    await run.tearDown();
  }
}

class ConfigurationRun {
  private readonly history: HistoryEvent[] = [];
  private readonly resources: string[];
  private readonly counters: Record<string, string>;
  private readonly viaGateway: boolean;
  private readonly apiKey = newApiKey();
  private readonly links: WorkerLinks[] = [];
  private readonly workers: WorkerHandle[] = [];
  private readonly deaths: string[] = [];
  private readonly problems: string[] = [];
  private connection: StoreConnection | undefined;
  private setup: CounterStore | undefined;
  private redis: RedisNodes | undefined;
  private gatewayStoreLink: DelayProxy | undefined;
  /** Started beside the workers (both take seconds to load), and waited for before the run begins. */
  private gatewayStarting: Promise<GatewayProcess> | undefined;
  private gateway: GatewayProcess | undefined;
  private injector: FaultInjector | undefined;
  private origin = process.hrtime.bigint();
  private completed = 0;
  /** When the run may end, however soon its operations are done. */
  private end: RunEnd | undefined;
  private stopping = false;
  private finish: () => void = () => undefined;
  private readonly finished = new Promise<void>((resolve) => (this.finish = resolve));

  constructor(private readonly options: RunOptions) {
    this.resources = Array.from({ length: options.resources }, (_, i) => `chaos-${i}`);
    // Every other counter's key is its resource's name: the PostgreSQL store's one-row path (its
    // fence copy) under the same faults as the fence-row path of the others.
    this.counters = Object.fromEntries(this.resources.map((r, i) => [r, i % 2 === 0 ? r : `counter/${r}`]));
    this.viaGateway = options.via === "gateway";
  }

  private get tag(): string {
    return `${this.options.store.backend}/${this.options.mode}${this.options.pairs ? " pairs" : ""}`;
  }

  /** Outcomes to wait for: one per operation, one per half of a pair. */
  private get target(): number {
    return this.options.ops * (this.options.pairs ? 2 : 1);
  }

  private readonly now = (): number => monoSince(this.origin);

  async setUp(): Promise<void> {
    const { options } = this;
    killWorkersOnExit();
    const connection = await options.store.namespace(options.mode);
    this.connection = connection;
    this.setup = await openCounterStore(connection, options.mode, { timeoutMs: options.deadlineMs });
    await this.setup.init(this.resources.map((resource) => ({ resource, key: this.counters[resource] ?? resource })));
    this.redis = await startRedisNodes(options.redisNodes, { faults: true, clockControl: [CLOCK_NODE] });
    const nodes = this.redis.nodes;
    if (this.viaGateway) {
      this.gatewayStoreLink = await DelayProxy.start(options.store.host, options.store.port);
      this.gatewayStarting = GatewayProcess.start({
        apiKey: this.apiKey,
        redisUrls: this.redis.urls,
        store: throughProxy(connection, this.gatewayStoreLink.port),
        resources: this.resources,
        keys: Object.values(this.counters),
        nodeTimeoutMs: NODE_TIMEOUT_MS,
        deadlineMs: options.deadlineMs,
        inlineLimit: INLINE_LIMIT,
      });
      // Awaited below; a failure before that must not be an unhandled rejection.
      this.gatewayStarting.catch(() => undefined);
    }
    for (let w = 0; w < options.workers; w++) {
      this.links.push({
        store: await DelayProxy.start(options.store.host, options.store.port),
        redis: this.viaGateway ? [] : await Promise.all(nodes.map((n) => DelayProxy.start(n.host, n.port))),
        // Its port is handed to the worker now; where it forwards is set once the gateway listens.
        gateway: this.viaGateway ? await DelayProxy.start("127.0.0.1", 0) : undefined,
      });
    }
  }

  /** Through a gateway, which links of a worker lead to it: all but the store link of "unfenced", which writes to the store itself. */
  private leadsToGateway(link: Link): boolean {
    return this.viaGateway && (link !== "store" || this.options.mode !== "unfenced");
  }

  private worker(w: number): WorkerHandle {
    const worker = this.workers[w];
    if (worker === undefined) throw new Error(`no worker ${w}`);
    return worker;
  }

  private proxy(w: number, link: Link): DelayProxy {
    const p = this.links[w];
    const proxy = this.leadsToGateway(link) ? p?.gateway : link === "store" ? p?.store : p?.redis[link];
    if (proxy === undefined) throw new Error(`no proxy for worker ${w} → ${String(link)}`);
    return proxy;
  }

  /** A reset of a worker's store link through a gateway cuts the gateway's own connections to the store. */
  private reset(w: number, link: Link): string {
    if (link === "store" && this.leadsToGateway(link) && this.gatewayStoreLink !== undefined) {
      this.gatewayStoreLink.resetConnections();
      return "gateway → store";
    }
    this.proxy(w, link).resetConnections();
    const to = this.leadsToGateway(link) ? "gateway" : link === "store" ? "store" : `redis ${this.redis?.nodes[link]?.name ?? link}`;
    return `worker ${w} → ${to}`;
  }

  private faultTargets(): FaultTargets {
    const gateway = this.viaGateway
      ? {
          gateway: { pause: () => this.gateway?.pause(), resume: () => this.gateway?.resume() },
          linkName: (link: Link) => (this.leadsToGateway(link) ? "gateway" : "store"),
        }
      : {};
    const store = this.options.store.faults;
    const storeClock = this.options.store.clock;
    return {
      pauseWorker: (w) => this.worker(w).pause(),
      resumeWorker: (w) => this.worker(w).resume(),
      armPauseInRmw: (w, fault, until) => this.worker(w).send({ type: "arm", fault, until }),
      releaseWorker: (w, fault) => this.worker(w).send({ type: "continue", fault }),
      redis: this.redis?.nodes ?? [],
      proxy: (w, link) => this.proxy(w, link),
      reset: (w, link) => this.reset(w, link),
      ...gateway,
      ...(store === undefined ? {} : { store }),
      ...(storeClock === undefined ? {} : { storeClock }),
    };
  }

  private workerConfig(w: number, links: WorkerLinks, connection: StoreConnection): WorkerConfig {
    const { options } = this;
    return {
      worker: w,
      mode: options.mode,
      store: throughProxy(connection, links.store.port),
      redisUrls: links.redis.map((proxy) => `redis://127.0.0.1:${proxy.port}`),
      ...(links.gateway === undefined ? {} : { gateway: { port: links.gateway.port, apiKey: this.apiKey, timeoutMs: GATEWAY_TIMEOUT_MS } }),
      counters: this.counters,
      ttlMs: options.ttlMs,
      nodeTimeoutMs: NODE_TIMEOUT_MS,
      deadlineMs: options.deadlineMs,
      workMs: options.workMs,
      seed: options.seed,
      pairs: options.pairs,
    };
  }

  private onMessage(message: FromWorker): void {
    if (message.type === "event") {
      this.history.push(message.event);
      this.end?.event(message.event);
      const t = message.event.type;
      if ((t === "ok" || t === "fail" || t === "info") && ++this.completed === this.target) this.end?.opsDone();
    } else if (message.type === "between-read-and-write") this.injector?.reachedRmw(message.worker, message.fault, message.mono);
  }

  async startWorkers(): Promise<void> {
    const { options } = this;
    const connection = this.connection;
    if (connection === undefined) throw new Error("startWorkers before setUp");
    const scheduleOptions: ScheduleOptions = {
      seed: options.seed,
      ttlMs: options.ttlMs,
      workers: options.workers,
      redisNodes: options.redisNodes,
      clockNode: CLOCK_NODE,
      gateway: this.viaGateway,
      ...(options.store.faults === undefined ? {} : { store: options.store.backend }),
    };
    const schedule = faultSchedule(scheduleOptions);
    this.end = new RunEnd(scheduleOptions, options.pairs, this.now, () => this.finish());
    // Built before the workers exist: it only reaches them through the targets' closures, once started.
    this.injector = new FaultInjector(schedule, this.faultTargets(), (event) => this.history.push(event), this.now, options.ttlMs);
    const ready = this.links.map((links, w) => {
      const worker = WorkerHandle.fork(this.workerConfig(w, links, connection));
      this.workers.push(worker);
      worker.child.once("exit", (code, signal) => {
        if (this.stopping) return;
        // A dead worker would stall the run until its timeout: end it now and say why.
        this.deaths.push(`worker ${w} died during the run (${String(code ?? signal)}): ${worker.output.trim().slice(-500)}`);
        this.finish();
      });
      return new Promise<void>((resolve, reject) => {
        worker.child.once("exit", (code) =>
          reject(new Error(`worker ${w} exited (${String(code)}) before it was ready:\n${worker.output}`)),
        );
        worker.child.on("message", (message: FromWorker) => (message.type === "ready" ? resolve() : this.onMessage(message)));
      });
    });
    await Promise.all(ready);
    this.gateway = await this.gatewayStarting;
    const gateway = this.gateway;
    if (gateway === undefined) return;
    for (const links of this.links) links.gateway?.forwardTo("127.0.0.1", gateway.port);
    void gateway.exited.then(() => {
      if (this.stopping) return;
      // Without its gateway no worker gets anywhere: end the run now and say why.
      this.deaths.push(`the gateway died during the run: ${gateway.log.trim().slice(-500)}`);
      this.finish();
    });
  }

  /** Runs the workers under the nemesis until the operations are done (or a process died, or the timeout); then heals and stops them. */
  async drive(): Promise<{ durationMs: number; timedOut: boolean }> {
    const { options } = this;
    this.origin = process.hrtime.bigint();
    for (const worker of this.workers) worker.send({ type: "go", origin: this.origin.toString() });
    this.injector?.start();
    const progress = setInterval(
      () => options.log(`[${this.tag}] ${this.completed}/${this.target} operations, ${(this.now() / 1000).toFixed(1)} s`),
      5_000,
    );
    // Never before the run may still be waiting for a wipe round to show.
    const timeoutMs = Math.max(options.timeoutMs, (this.end?.latestMs ?? 0) + 30_000);
    const timeout = new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), timeoutMs).unref());
    const outcome = await Promise.race([this.finished.then(() => "done" as const), timeout]);
    clearInterval(progress);
    const durationMs = this.now();

    // Heal first, so that no worker is left stopped or cut off, then let each finish its operation.
    this.stopping = true;
    await this.injector?.stop();
    for (const failure of this.injector?.failures ?? []) this.problems.push(`the nemesis failed: ${failure}`);
    for (const worker of this.workers) {
      worker.resumeAll();
      worker.send({ type: "stop" });
    }
    const stopped = await Promise.race([
      Promise.all(this.workers.map((w) => w.exited)).then(() => true),
      new Promise<boolean>((resolve) => setTimeout(() => resolve(false), STOP_TIMEOUT_MS).unref()),
    ]);
    if (!stopped) {
      this.problems.push(`workers did not stop within ${STOP_TIMEOUT_MS / 1000} s and were killed`);
      // Before the final read: a worker still writing would race with it.
      for (const worker of this.workers) worker.kill();
      await Promise.all(this.workers.map((w) => w.exited));
    }
    // Before the final read: a request a worker gave up on may still be running in the gateway.
    await this.gateway?.stop();
    return { durationMs, timedOut: outcome === "timeout" };
  }

  /** Reads every counter (retrying while a store server just restarted finishes coming back) and checks the history. */
  async conclude({ durationMs, timedOut }: { durationMs: number; timedOut: boolean }): Promise<RunResult> {
    const { options, history } = this;
    for (const resource of this.resources) {
      const { doc } = await this.finalRead(this.counters[resource] ?? resource);
      history.push({ type: "final", resource, count: doc.count, log: doc.log, mono: this.now(), wall: Date.now() });
    }
    history.sort((a, b) => a.mono - b.mono);
    const result = check(history, { deadlineMs: options.deadlineMs, marginMs: options.livenessMarginMs });
    options.log(
      `[${this.tag}] ${result.ops.total} operations in ${(durationMs / 1000).toFixed(1)} s; violations ${JSON.stringify(result.violations)}`,
    );
    return {
      mode: options.mode,
      backend: options.store.backend,
      durationMs: Math.round(durationMs),
      timedOut,
      deaths: this.deaths,
      problems: this.problems,
      faults: this.injector?.faults ?? noFaults(),
      faultsMissed: this.injector?.missed ?? 0,
      history,
      check: result,
    };
  }

  private async finalRead(key: string): Promise<Awaited<ReturnType<CounterStore["read"]>>> {
    const setup = this.setup;
    if (setup === undefined) throw new Error("conclude before setUp");
    for (let attempt = 1; ; attempt++) {
      try {
        return await setup.read(key);
      } catch (err) {
        if (attempt >= 10) throw err;
        await sleep(500);
      }
    }
  }

  async tearDown(): Promise<void> {
    for (const worker of this.workers) worker.kill();
    await Promise.all(this.workers.map((w) => w.exited));
    const proxies = this.links.flatMap((l) => [l.store, ...l.redis, ...(l.gateway === undefined ? [] : [l.gateway])]);
    if (this.gatewayStoreLink !== undefined) proxies.push(this.gatewayStoreLink);
    await Promise.allSettled(proxies.map((proxy) => proxy.close()));
    // Also a gateway that started while the workers failed to.
    await (this.gateway ?? (await this.gatewayStarting?.catch(() => undefined)))?.stop();
    await this.redis?.stop();
    await this.setup?.close().catch(() => undefined);
  }
}
