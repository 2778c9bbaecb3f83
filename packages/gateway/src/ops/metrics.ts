import { backendFailure } from "../problems/backend-errors.js";
import { collectDefaultMetrics, Counter, Histogram, Registry } from "prom-client";

export type StoreName = "records" | "objects";
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
  readonly #backend: Histogram<"store" | "op">;
  readonly #leases: Counter<"event">;
  readonly #leasesLost: Counter<"kind">;
  readonly #leasesAbandoned: Counter;

  constructor(options: { defaultMetrics?: boolean } = {}) {
    const registers = [this.registry];
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
      help: "Calls into the fenced stores and the lock, by store and operation",
      labelNames: ["store", "op"],
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
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry, prefix: "fenced_gateway_" });
  }

  /**
   * Label sets resolved to their series once: prom-client hashes the label object on every call
   * otherwise, a few microseconds per observation on the hot path. The sets are small and closed.
   */
  readonly #series = new Map<string, { inc(): void } | { observe(value: number): void; startTimer(): () => number }>();

  #child<T>(key: string, make: () => T): T {
    let child = this.#series.get(key) as T | undefined;
    if (child === undefined) {
      child = make();
      this.#series.set(key, child as never);
    }
    return child;
  }

  writeAccepted(store: StoreName, op: WriteOp): void {
    this.#child(`a ${store} ${op}`, () => this.#accepted.labels({ store, op })).inc();
  }

  writeRejected(store: StoreName, op: WriteOp, reason: string): void {
    this.#child(`r ${store} ${op} ${reason}`, () => this.#rejected.labels({ store, op, reason })).inc();
  }

  request(route: string, method: string, status: number, seconds: number): void {
    this.#child(`q ${route} ${method} ${status}`, () => this.#requests.labels({ route, method, status: String(status) })).observe(seconds);
  }

  /** Times a store or lock call; the histogram sees failures too (a slow refusal is still slow). */
  async time<T>(store: string, op: string, call: () => Promise<T>): Promise<T> {
    const end = this.#child(`b ${store} ${op}`, () => this.#backend.labels({ store, op })).startTimer();
    try {
      return await call();
    } catch (err) {
      // Classified here, where it is known which backend was called: its own error answer, which
      // the stores pass on unchanged (502, never a 500 of the gateway's).
      throw backendFailure(store, op, err) ?? err;
    } finally {
      end();
    }
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
}
