import { fork, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { startRedisNodes, type RedisNodes } from "@fenced/servers";
import { check, type CheckResult } from "./checker.js";
import { INLINE_LIMIT, openCounterStore } from "./counter-store.js";
import { DelayProxy } from "./delay-proxy.js";
import { FaultInjector } from "./fault-injector.js";
import { GatewayProcess, killGatewaysNow, newApiKey } from "./gateway-process.js";
import { monoSince, type Backend, type FaultKind, type HistoryEvent, type Mode, type Via } from "./history.js";
import { faultSchedule, type Link } from "./nemesis.js";
import { throughProxy, type StoreServer } from "./store-server.js";
import { WORKER_ENV, type FromWorker, type ToWorker, type WorkerConfig } from "./worker.js";

export interface RunOptions {
  readonly mode: Mode;
  readonly store: StoreServer;
  /** "gateway": the workers take leases (and, unless unfenced, read and write) through a gateway process. */
  readonly via: Via;
  /** Stop once this many operations have completed (ok, fail or indeterminate). */
  readonly ops: number;
  readonly seed: number;
  readonly ttlMs: number;
  readonly workers: number;
  readonly resources: number;
  readonly redisNodes: number;
  readonly workMs: number;
  /** Give up (and fail the run) if the operations are not done by then. */
  readonly timeoutMs: number;
  readonly log: (line: string) => void;
}

export interface RunResult {
  readonly mode: Mode;
  readonly backend: Backend;
  readonly durationMs: number;
  readonly timedOut: boolean;
  /** Workers that died or had to be killed: the run proves less than it should. */
  readonly problems: readonly string[];
  readonly faults: Readonly<Record<FaultKind, number>>;
  readonly faultsMissed: number;
  readonly history: readonly HistoryEvent[];
  readonly check: CheckResult;
}

/** worker.ts beside this file when run from source (through tsx), worker.js when built. */
const FROM_SOURCE = new URL(import.meta.url).pathname.endsWith(".ts");
const WORKER_FILE = fileURLToPath(new URL(FROM_SOURCE ? "./worker.ts" : "./worker.js", import.meta.url));
/** The package directory: `--import tsx` is resolved from the child's working directory. */
const PACKAGE_DIR = fileURLToPath(new URL("..", import.meta.url));
/** The one Redis node whose wall clock the nemesis moves. */
const CLOCK_NODE = 0;
/** Per lock node, in the workers' Redlock and in the gateway's. */
const NODE_TIMEOUT_MS = 150;
/** A worker's request to the gateway that has no answer by then fails (a write's outcome is then unknown); longer than any pause or delay. */
const GATEWAY_TIMEOUT_MS = 10_000;

/**
 * Workers of every run, so that none outlives the controller however it exits. A stopped worker
 * would otherwise survive a Ctrl-C (the SIGINT stays pending) as a stopped orphan.
 */
const liveWorkers = new Set<ChildProcess>();
let exitHooked = false;
function killWorkersOnExit(): void {
  if (exitHooked) return;
  exitHooked = true;
  const killAll = (): void => {
    for (const child of liveWorkers) {
      child.kill("SIGCONT");
      child.kill("SIGKILL");
    }
    killGatewaysNow();
  };
  process.once("exit", killAll);
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    // First in line: the server harness's own handler re-raises the signal, which ends the process.
    process.prependOnceListener(signal, () => {
      killAll();
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    });
  }
}

class WorkerHandle {
  private depth = 0;
  private readonly done: Promise<void>;
  private stderr = "";

  constructor(
    readonly index: number,
    readonly child: ChildProcess,
  ) {
    child.stderr?.on("data", (chunk: Buffer) => (this.stderr = (this.stderr + chunk.toString("utf8")).slice(-4_000)));
    this.done = new Promise((resolve) => child.once("exit", () => resolve()));
    void this.done.then(() => liveWorkers.delete(child));
  }

  get exited(): Promise<void> {
    return this.done;
  }

  get output(): string {
    return this.stderr;
  }

  send(message: ToWorker): void {
    if (this.child.connected) this.child.send(message);
  }

  pause(): void {
    if (this.depth++ === 0) this.signal("SIGSTOP");
  }

  resume(): void {
    this.depth = Math.max(0, this.depth - 1);
    if (this.depth === 0) this.signal("SIGCONT");
  }

  resumeAll(): void {
    this.depth = 0;
    this.signal("SIGCONT");
  }

  private signal(signal: NodeJS.Signals): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
  }
}

/**
 * One configuration against one backend: fresh Redis nodes, a fresh store namespace, a delay proxy
 * per worker and server, the workers, the nemesis on the seeded schedule; then heal everything,
 * stop the workers, read the counters directly (not through the proxies) and check the history.
 *
 * Through a gateway, the gateway process talks to the Redis nodes and the store directly, and each
 * worker reaches it through a delay proxy of its own: a delay the schedule puts on a worker's link
 * to a Redis node or to the store holds back its traffic to the gateway instead (in "unfenced", whose
 * writes still go straight to the store, a delay on the store link stays on the store link).
 */
export async function runConfiguration(options: RunOptions): Promise<RunResult> {
  const { mode, store, log } = options;
  const tag = `${store.backend}/${mode}`;
  const history: HistoryEvent[] = [];
  const resources = Array.from({ length: options.resources }, (_, i) => `chaos-${i}`);
  const counters = Object.fromEntries(resources.map((r) => [r, `counter/${r}`]));

  const connection = await store.namespace(mode);
  const setup = openCounterStore(connection, mode);
  let redis: RedisNodes | undefined;
  const viaGateway = options.via === "gateway";
  /** Started beside the workers (both take seconds to load), and waited for before the run begins. */
  let gatewayStarting: Promise<GatewayProcess> | undefined;
  let gateway: GatewayProcess | undefined;
  const apiKey = newApiKey();
  const proxies: { store: DelayProxy; redis: DelayProxy[]; gateway: DelayProxy | undefined }[] = [];
  const workers: WorkerHandle[] = [];
  killWorkersOnExit();
  try {
    await setup.init(resources.map((resource) => ({ resource, key: counters[resource] ?? resource })));
    redis = await startRedisNodes(options.redisNodes, { faults: true, clockControl: [CLOCK_NODE] });
    const nodes = redis.nodes;
    if (viaGateway) {
      gatewayStarting = GatewayProcess.start({
        apiKey,
        redisUrls: redis.urls,
        store: connection,
        resources,
        keys: Object.values(counters),
        nodeTimeoutMs: NODE_TIMEOUT_MS,
        inlineLimit: INLINE_LIMIT,
      });
      // Awaited below; a failure before that must not be an unhandled rejection.
      gatewayStarting.catch(() => undefined);
    }
    for (let w = 0; w < options.workers; w++) {
      proxies.push({
        store: await DelayProxy.start(store.host, store.port),
        redis: viaGateway ? [] : await Promise.all(nodes.map((n) => DelayProxy.start(n.host, n.port))),
        // Its port is handed to the worker now; where it forwards is set once the gateway listens.
        gateway: viaGateway ? await DelayProxy.start("127.0.0.1", 0) : undefined,
      });
    }
    let origin = process.hrtime.bigint();
    const now = (): number => monoSince(origin);
    let completed = 0;
    let stopping = false;
    const problems: string[] = [];
    let finish: () => void = () => undefined;
    const finished = new Promise<void>((resolve) => (finish = resolve));

    // Built before the workers exist: it only reaches them through these closures, once started.
    /** Through a gateway, which links of a worker lead to it: all but the store link of "unfenced", which writes to the store itself. */
    const gatewayLink = (link: Link): boolean => viaGateway && (link !== "store" || mode !== "unfenced");
    const byIndex = (w: number): WorkerHandle => {
      const worker = workers[w];
      if (worker === undefined) throw new Error(`no worker ${w}`);
      return worker;
    };
    const injector = new FaultInjector(
      faultSchedule({
        seed: options.seed,
        ttlMs: options.ttlMs,
        workers: options.workers,
        redisNodes: options.redisNodes,
        clockNode: CLOCK_NODE,
        gateway: viaGateway,
      }),
      {
        pauseWorker: (w) => byIndex(w).pause(),
        resumeWorker: (w) => byIndex(w).resume(),
        armPauseInRmw: (w, fault, until) => byIndex(w).send({ type: "arm", fault, until }),
        releaseWorker: (w, fault) => byIndex(w).send({ type: "continue", fault }),
        redis: nodes,
        proxy: (w: number, link: Link) => {
          const p = proxies[w];
          const proxy = gatewayLink(link) ? p?.gateway : link === "store" ? p?.store : p?.redis[link];
          if (proxy === undefined) throw new Error(`no proxy for worker ${w} → ${String(link)}`);
          return proxy;
        },
        ...(viaGateway
          ? {
              gateway: { pause: () => gateway?.pause(), resume: () => gateway?.resume() },
              linkName: (link: Link) => (gatewayLink(link) ? "gateway" : "store"),
            }
          : {}),
      },
      (event) => history.push(event),
      now,
      options.ttlMs,
    );
    const ready: Promise<void>[] = [];
    for (let w = 0; w < options.workers; w++) {
      const p = proxies[w];
      if (p === undefined) throw new Error("missing proxies");
      const config: WorkerConfig = {
        worker: w,
        mode,
        store: throughProxy(connection, p.store.port),
        redisUrls: p.redis.map((proxy) => `redis://127.0.0.1:${proxy.port}`),
        ...(p.gateway === undefined ? {} : { gateway: { port: p.gateway.port, apiKey, timeoutMs: GATEWAY_TIMEOUT_MS } }),
        counters,
        ttlMs: options.ttlMs,
        nodeTimeoutMs: NODE_TIMEOUT_MS,
        workMs: options.workMs,
        seed: options.seed,
      };
      const child = fork(WORKER_FILE, [], {
        cwd: PACKAGE_DIR,
        execArgv: FROM_SOURCE ? ["--import", "tsx", "--conditions=source"] : [],
        env: { ...process.env, [WORKER_ENV]: JSON.stringify(config) },
        stdio: ["ignore", "ignore", "pipe", "ipc"],
      });
      liveWorkers.add(child);
      const worker = new WorkerHandle(w, child);
      workers.push(worker);
      child.once("exit", (code, signal) => {
        if (stopping) return;
        // A dead worker would stall the run until its timeout: end it now and say why.
        problems.push(`worker ${w} died during the run (${String(code ?? signal)}): ${worker.output.trim().slice(-500)}`);
        finish();
      });
      ready.push(
        new Promise((resolve, reject) => {
          child.once("exit", (code) => reject(new Error(`worker ${w} exited (${String(code)}) before it was ready:\n${worker.output}`)));
          child.on("message", (message: FromWorker) => {
            if (message.type === "ready") resolve();
            else if (message.type === "event") {
              history.push(message.event);
              const t = message.event.type;
              if ((t === "ok" || t === "fail" || t === "info") && ++completed === options.ops) finish();
            } else if (message.type === "between-read-and-write") injector.reachedRmw(message.worker, message.fault, message.mono);
          });
        }),
      );
    }
    await Promise.all(ready);
    gateway = await gatewayStarting;
    for (const p of proxies) if (gateway !== undefined) p.gateway?.forwardTo("127.0.0.1", gateway.port);
    void gateway?.exited.then(() => {
      if (stopping) return;
      // Without its gateway no worker gets anywhere: end the run now and say why.
      problems.push(`the gateway died during the run: ${gateway?.log.trim().slice(-500) ?? ""}`);
      finish();
    });
    origin = process.hrtime.bigint();

    for (const worker of workers) worker.send({ type: "go", origin: origin.toString() });
    injector.start();
    const progress = setInterval(() => log(`[${tag}] ${completed}/${options.ops} operations, ${(now() / 1000).toFixed(1)} s`), 5_000);
    const timeout = new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), options.timeoutMs).unref());
    const outcome = await Promise.race([finished.then(() => "done" as const), timeout]);
    clearInterval(progress);
    const durationMs = now();

    // Heal first, so that no worker is left stopped or cut off, then let each finish its operation.
    stopping = true;
    await injector.stop();
    for (const worker of workers) {
      worker.resumeAll();
      worker.send({ type: "stop" });
    }
    const stopped = await Promise.race([
      Promise.all(workers.map((w) => w.exited)).then(() => true),
      new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 30_000).unref()),
    ]);
    if (!stopped) {
      problems.push("workers did not stop within 30 s and were killed");
      // Before the final read: a worker still writing would race with it.
      for (const worker of workers) worker.child.kill("SIGKILL");
      await Promise.all(workers.map((w) => w.exited));
    }
    // Before the final read: a request a worker gave up on may still be running in the gateway.
    await gateway?.stop();

    for (const resource of resources) {
      const { doc } = await setup.read(counters[resource] ?? resource);
      history.push({ type: "final", resource, count: doc.count, log: doc.log, mono: now(), wall: Date.now() });
    }
    history.sort((a, b) => a.mono - b.mono);
    const result = check(history);
    log(`[${tag}] ${result.ops.total} operations in ${(durationMs / 1000).toFixed(1)} s; violations ${JSON.stringify(result.violations)}`);
    return {
      mode,
      backend: store.backend,
      durationMs: Math.round(durationMs),
      timedOut: outcome === "timeout",
      problems,
      faults: injector.faults,
      faultsMissed: injector.missed,
      history,
      check: result,
    };
  } finally {
    for (const worker of workers) {
      worker.child.kill("SIGCONT");
      worker.child.kill("SIGKILL");
    }
    await Promise.all(workers.map((w) => w.exited));
    await Promise.allSettled(
      proxies.flatMap((p) => [p.store, ...p.redis, ...(p.gateway === undefined ? [] : [p.gateway])].map((proxy) => proxy.close())),
    );
    // Also a gateway that started while the workers failed to.
    await (gateway ?? (await gatewayStarting?.catch(() => undefined)))?.stop();
    await redis?.stop();
    await setup.close().catch(() => undefined);
  }
}
