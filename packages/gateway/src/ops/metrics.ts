import { performance } from "node:perf_hooks";
import type { NodeResult } from "@fenced/lock/internal";
import { backendFailure } from "../problems/backend-errors.js";
import { PROBLEM_TYPES } from "../problems/kinds.js";
import { classify } from "../problems/problem.js";
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import { GATEWAY_VERSION } from "../version.js";
import { AdmissionMetrics } from "../admission/metrics.js";
import type { MalformedReason } from "../http/client-errors.js";
import type { Family, StorePool, StoreRegistration } from "../stores/registration.js";

/** A write's operation: put_all is POST /v1/records (several records at once), counted once per request. */
export type WriteOp = "put" | "delete" | "put_all";

/**
 * One registry per gateway, so that two gateways in one process (tests, embedding) never share or
 * double-register series. Labels are small closed sets — never keys, resources or API key ids, which
 * are unbounded and could leak names to whoever scrapes /metrics.
 */
export class GatewayMetrics {
  readonly registry = new Registry();
  readonly #accepted: Counter<"store" | "op">;
  readonly #rejected: Counter<"store" | "op" | "reason">;
  readonly #requests: Histogram<"route" | "method" | "status">;
  readonly #backend: Histogram<"store" | "op" | "outcome">;
  readonly #leases: Counter<"event">;
  readonly #leasesLost: Counter<"kind">;
  readonly #leasesAbandoned: Counter;
  readonly #lockNodeUp: Gauge<"node" | "address">;
  /** A probe of every lock node, run by each scrape (lockNodes' `refresh`); none without a lock. */
  #refreshLockNodes: (() => Promise<void>) | undefined;
  readonly #lockNodeLatency: Histogram<"node" | "address">;
  readonly #lockNodeFailures: Counter<"node" | "address" | "kind">;
  readonly #malformed: Counter<"reason">;
  /** The registration serving each store family: whose backend a failed call of that family reached. */
  readonly #served = new Map<string, StoreRegistration>();
  /** Admission control's refusals and each route family's gate (admission/metrics.ts). */
  readonly admission: AdmissionMetrics;

  readonly #nodeAddresses: boolean;

  /**
   * `nodeAddresses`: label each lock node's series with its address — only when /metrics is served on
   * the admin listener alone (GatewayOptions.separateAdmin); the public listener never shows an
   * address, so there the label is empty. Default false.
   */
  constructor(options: { defaultMetrics?: boolean; nodeAddresses?: boolean } = {}) {
    this.#nodeAddresses = options.nodeAddresses ?? false;
    const registers = [this.registry];
    this.admission = new AdmissionMetrics(this.registry);
    this.#accepted = new Counter({
      name: "fenced_gateway_writes_accepted_total",
      help: "Writes the storage accepted",
      labelNames: ["store", "op"],
      registers,
    });
    this.#rejected = new Counter({
      name: "fenced_gateway_writes_rejected_total",
      help: "Writes refused, by reason (stale_token, version_mismatch, invalid_request, unauthorized, forbidden, too_large, …)",
      labelNames: ["store", "op", "reason"],
      registers,
    });
    this.#requests = new Histogram({
      name: "fenced_gateway_request_duration_seconds",
      help: "HTTP requests, from arrival to the end of the response",
      labelNames: ["route", "method", "status"],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.#backend = new Histogram({
      name: "fenced_gateway_store_duration_seconds",
      help: "Calls into the fenced stores and the lock, by store, operation and outcome (ok, or the slug of the problem its error is answered with, _ for -)",
      labelNames: ["store", "op", "outcome"],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.#leases = new Counter({
      name: "fenced_gateway_leases_total",
      help: "Lease operations: granted, refused (held elsewhere), extended, released",
      labelNames: ["event"],
      registers,
    });
    this.#leasesLost = new Counter({
      name: "fenced_gateway_leases_lost_total",
      help: "Extensions that found the lease lost, by kind",
      labelNames: ["kind"],
      registers,
    });
    this.#leasesAbandoned = new Counter({
      name: "fenced_gateway_leases_abandoned_total",
      help: "Leases granted or registered after their client had gone (closed the connection, or cut by the drain), released at once",
      registers,
    });
    this.#malformed = new Counter({
      name: "fenced_gateway_malformed_requests_total",
      help: "HTTP the server could not parse into a request (answered 400, 408, 413 or 431 and closed), by reason",
      labelNames: ["reason"],
      registers,
    });
    buildInfo(registers);
    this.#lockNodeUp = new Gauge({
      name: "fenced_gateway_lock_node_up",
      help: "1 when the lock node answered the last call to it, 0 when it refused, timed out or failed it: whichever answered last, a lease script or a PING (each scrape's, within the lock's node timeout; /readyz's; the start check's)",
      labelNames: ["node", "address"],
      registers,
      // Each scrape PINGs every node first: an alert on this gauge sees a dead node with no lease and no
      // readiness probe, within one node timeout of the scrape.
      collect: () => this.#refreshLockNodes?.(),
    });
    this.#lockNodeLatency = new Histogram({
      name: "fenced_gateway_lock_node_duration_seconds",
      help: "Each lock node's answers to the lock's calls (acquire, publish, extend, release), from the round's start",
      labelNames: ["node", "address"],
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
      registers,
    });
    this.#lockNodeFailures = new Counter({
      name: "fenced_gateway_lock_node_failures_total",
      help: "Lock calls a node did not count for, by kind: refused (its connection is refused), timeout (no answer within nodeTimeoutMs), error",
      labelNames: ["node", "address", "kind"],
      registers,
    });
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry, prefix: "fenced_gateway_" });
  }

  /**
   * Label sets resolved to their series once: prom-client hashes the label object on every call
   * otherwise, a few microseconds per observation on the hot path. The sets are small and closed.
   */
  readonly #acceptedSeries = new Series((store, op) => this.#accepted.labels({ store, op }));
  readonly #rejectedSeries = new Series((store, op, reason) => this.#rejected.labels({ store, op, reason }));
  readonly #requestSeries = new Series((route, method, status) => this.#requests.labels({ route, method, status }));
  readonly #backendSeries = new Series((store, op, outcome) => this.#backend.labels({ store, op, outcome }));

  writeAccepted(store: Family, op: WriteOp): void {
    this.#acceptedSeries.get(store, op).inc();
  }

  writeRejected(store: Family, op: WriteOp, reason: string): void {
    this.#rejectedSeries.get(store, op, reason).inc();
  }

  request(route: string, method: string, status: number, seconds: number): void {
    this.#requestSeries.get(route, method, status).observe(seconds);
  }

  /**
   * Times a store or lock call, by its outcome: `ok`, or the problem its error is answered with
   * (outcomeNames' metric spelling: stale_token, unavailable, …). Failures are timed too (a slow
   * refusal is still slow).
   */
  async time<T>(store: string, op: string, call: () => Promise<T>): Promise<T> {
    const started = performance.now();
    let outcome = "ok";
    try {
      return await call();
    } catch (err) {
      // Classified here, where it is known which backend was called: its own error answer, which
      // the stores pass on unchanged (502, never a 500 of the gateway's).
      const failure = backendFailure(this.#served.get(store), op, err) ?? err;
      outcome = PROBLEM_TYPES[classify(failure).kind].reason;
      throw failure;
    } finally {
      const seconds = (performance.now() - started) / 1000;
      this.#backendSeries.get(store, op, outcome).observe(seconds);
    }
  }

  /**
   * Each lock node's series, labelled by its index and, with nodeAddresses, `addresses[index]`
   * (host:port as its client holds it, never a password; "unknown" where there is none): `result`
   * counts the lock's per-node results (RedlockOptions.onNodeResult) — latency, failures by kind,
   * every node's failures at 0 from here on; `up` sets the node's state, which LockNodeStates
   * (lock-nodes.ts) decides from both the probes and the lease scripts. Each scrape awaits `refresh`
   * (a probe of every node, bounded by the node timeout) before it reads the state.
   */
  lockNodes(
    addresses: readonly (string | undefined)[],
    refresh: () => Promise<unknown>,
  ): {
    result: (result: NodeResult) => void;
    up: (node: number, up: boolean) => void;
  } {
    const nodes = addresses.map((address, node) => {
      const labels = { node: String(node), address: this.#nodeAddresses ? (address ?? "unknown") : "" };
      const failures = { refused: 0, timeout: 0, error: 0 };
      return {
        up: this.#lockNodeUp.labels(labels),
        latency: this.#lockNodeLatency.labels(labels),
        failures: Object.fromEntries(
          Object.keys(failures).map((kind) => [kind, this.#lockNodeFailures.labels({ ...labels, kind })]),
        ) as Record<keyof typeof failures, Counter.Internal>,
      };
    });
    for (const node of nodes) for (const counter of Object.values(node.failures)) counter.inc(0);
    // A probe resolves with every node's state and never rejects (probeNodes); were one to, the scrape
    // still answers, with the state the nodes last showed.
    this.#refreshLockNodes = () =>
      refresh().then(
        () => undefined,
        () => undefined,
      );
    return {
      result: ({ node, ms, failure }) => {
        const series = nodes[node];
        if (series === undefined) return;
        if (failure === undefined) series.latency.observe(ms / 1000);
        else series.failures[failure.reason].inc();
      },
      up: (node, up) => nodes[node]?.up.set(up ? 1 : 0),
    };
  }

  /**
   * The pool of a store `registration` serves, as each scrape finds it: `waiting` above 0 means calls
   * queue for a connection — the pool, not the backend, bounds the writes then, and each waits its turn.
   */
  storePool(registration: StoreRegistration, pool: StorePool): void {
    poolGauge([this.registry], registration, pool);
  }

  /** `family`'s calls reach `registration`'s backend: its own errors are told by it (time()). */
  servedBy(family: string, registration: StoreRegistration): void {
    this.#served.set(family, registration);
  }

  lease(event: "granted" | "refused" | "extended" | "released"): void {
    this.#leases.inc({ event });
  }

  leaseLost(kind: string): void {
    this.#leasesLost.inc({ kind });
  }

  leaseAbandoned(): void {
    this.#leasesAbandoned.inc();
  }

  /** A request the server could not parse (http/client-errors.ts): `reason` is one of its closed set. */
  malformed(reason: MalformedReason): void {
    this.#malformed.inc({ reason });
  }
}

/**
 * fenced_gateway_<store>_pool (PostgreSQL's: fenced_gateway_postgres_pool), read from `pool` at each
 * scrape: named by the store, as a store's own metric, so that a store's registration is all it
 * takes to report its pool.
 */
function poolGauge(registers: Registry[], registration: StoreRegistration, pool: StorePool): void {
  const gauge: Gauge<"state"> = new Gauge({
    name: `fenced_gateway_${registration.name}_pool`,
    help: `The ${registration.family} store's ${registration.title} pool when scraped: connections busy and idle, and calls waiting for one (waiting)`,
    labelNames: ["state"],
    registers,
    collect: () => {
      gauge.reset();
      // A pool-like object of the user's may not count (a wrapper, another driver): then there is nothing to show.
      if (![pool.totalCount, pool.idleCount, pool.waitingCount].every(Number.isFinite)) return;
      gauge.set({ state: "busy" }, pool.totalCount - pool.idleCount);
      gauge.set({ state: "idle" }, pool.idleCount);
      gauge.set({ state: "waiting" }, pool.waitingCount);
    },
  });
}

/** fenced_gateway_build_info: always 1, labelled with the gateway's version. */
function buildInfo(registers: Registry[]): void {
  new Gauge({
    name: "fenced_gateway_build_info",
    help: "The gateway's version (@fenced/gateway's package.json): always 1",
    labelNames: ["version"],
    registers,
  }).set({ version: GATEWAY_VERSION }, 1);
}

/**
 * A metric's series by up to three label values, in nested maps: a lookup joins no strings (a key
 * made of the values cost the write about 0.15 µs a lookup, three lookups a write). `make` runs once
 * per distinct set of values, a number among them as its decimal text.
 */
class Series<T> {
  readonly #byFirst = new Map<string, Map<string, Map<string | number, T>>>();

  constructor(private readonly make: (first: string, second: string, third: string) => T) {}

  get(first: string, second: string, third: string | number = ""): T {
    let bySecond = this.#byFirst.get(first);
    if (bySecond === undefined) this.#byFirst.set(first, (bySecond = new Map<string, Map<string | number, T>>()));
    let byThird = bySecond.get(second);
    if (byThird === undefined) bySecond.set(second, (byThird = new Map<string | number, T>()));
    let series = byThird.get(third);
    if (series === undefined) byThird.set(third, (series = this.make(first, second, String(third))));
    return series;
  }
}
