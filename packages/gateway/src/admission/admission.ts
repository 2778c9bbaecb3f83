import { performance } from "node:perf_hooks";
import { FairQueue } from "./fair-queue.js";
import { GradientLimit, type LimitSettings } from "./limit.js";
import type { ShedReason } from "../vocabulary/shed-reasons.js";

/** Which requests wait and which go first: 0 lease acquisitions (the first refused), 1 reads and writes. */
const PRIORITIES = ["acquire", "work"] as const;
export type Priority = (typeof PRIORITIES)[number];

/** A waiting request admission refused (its wait's timeout, or its place given to another): answered 503 `overloaded` before any lock or store work. */
export class OverloadedError extends Error {
  constructor(readonly reason: ShedReason) {
    super(REFUSALS[reason]);
    this.name = "OverloadedError";
  }
}

/** Each refusal's detail, as its answer says it. */
export const REFUSALS: Record<ShedReason, string> = {
  "queue-full": "the gateway is at its limit and its queue is full",
  "queue-timeout": "the gateway is at its limit and the request waited its longest in the queue",
  evicted: "the gateway is at its limit and the request's place in the queue went to one of a higher priority or of a key waiting less",
  "event-loop-delay": "the gateway is behind on the work it has",
};

export interface AdmissionSettings {
  readonly limit: LimitSettings;
  /** false: the limit stays at `limit.max` (object bodies make a call's time a measure of its size, not of a backlog). */
  readonly adaptive: boolean;
  /** Requests that may wait for a slot; 0: none wait. */
  readonly queueLength: number;
  /**
   * How long a request waits for a slot before it is refused: at least this, and until the I/O that
   * was ready when it elapsed has been read. A loop that stalled (a long collection, a host that took
   * the CPU) fires the timer late, on the same turn as the answers that arrived meanwhile; those
   * answers free slots (the poll phase, after the timers) before the refusal is made (setImmediate,
   * the check phase, after the poll). Without it a stall longer than the wait refused every queued
   * request whose slot was already free, waiting unread.
   */
  readonly queueTimeoutMs: number;
  /** Whether a call's time now tells how busy its backend is (default: always); when not, the limit learns nothing from it. */
  readonly measuring?: () => boolean;
}

/** Ends a request's hold on its slot (once; later calls do nothing). */
export type Release = () => void;

interface Waiter {
  readonly priority: number;
  readonly key: string;
  readonly resolve: (release: Release) => void;
  readonly reject: (err: Error) => void;
  timer?: NodeJS.Timeout;
}

/**
 * The gate of one route family: a request is let in while fewer than the limit are in flight and
 * nobody waits; otherwise it waits in the queue (refused when the queue is full and it outranks
 * nobody there, or when it has waited queueTimeoutMs); each release lets in the next one the queue
 * names. The limit, the queue and the count in flight decide; nothing about a request's content does.
 */
export class Admission {
  #inflight = 0;
  readonly #limit: GradientLimit;
  readonly #queue = new FairQueue<Waiter>(PRIORITIES.length);

  constructor(readonly settings: AdmissionSettings) {
    this.#limit = new GradientLimit(settings.adaptive ? settings.limit : { ...settings.limit, initial: settings.limit.max });
  }

  get limit(): number {
    return this.#limit.limit;
  }
  get inflight(): number {
    return this.#inflight;
  }
  get queued(): number {
    return this.#queue.size;
  }
  /** Requests of `key` waiting for a slot. */
  queuedOf(key: string): number {
    return this.#queue.sizeOf(key);
  }

  /**
   * A release at once; "queue-full" when refused at once (a value, not an error: under overload that
   * is the common answer, and it must cost little); or the promise of a release once a slot is free,
   * rejected with OverloadedError when the request is refused while it waits. `watch` is called only
   * when the request waits: it arranges for `cancel` to be called if its client leaves meanwhile (the
   * promise then rejects with that reason).
   */
  admit(priority: Priority, key: string, watch?: (cancel: (reason: Error) => void) => void): Release | "queue-full" | Promise<Release> {
    if (this.#inflight < this.limit && this.#queue.size === 0) return this.#grant();
    const level = PRIORITIES.indexOf(priority);
    if (this.#queue.size >= this.settings.queueLength) {
      const victim = this.settings.queueLength === 0 ? undefined : this.#queue.evictFor(level, key);
      if (victim === undefined) return "queue-full";
      clearTimeout(victim.timer);
      victim.reject(new OverloadedError("evicted"));
    }
    return new Promise<Release>((resolve, reject) => {
      const waiter: Waiter = { priority: level, key, resolve, reject };
      const leave = (err: Error): void => {
        if (!this.#queue.remove(level, key, waiter)) return;
        clearTimeout(waiter.timer);
        reject(err);
      };
      waiter.timer = setTimeout(() => setImmediate(() => leave(new OverloadedError("queue-timeout"))), this.settings.queueTimeoutMs);
      this.#queue.push(level, key, waiter);
      watch?.(leave);
    });
  }

  #grant(): Release {
    const inflight = ++this.#inflight;
    const started = performance.now();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#inflight--;
      const now = performance.now();
      if (this.settings.adaptive && (this.settings.measuring?.() ?? true)) this.#limit.sample(now, now - started, inflight);
      this.#next();
    };
  }

  /** Lets in queued requests while there is room, in the queue's order. */
  #next(): void {
    while (this.#inflight < this.limit) {
      const waiter = this.#queue.shift();
      if (waiter === undefined) return;
      clearTimeout(waiter.timer);
      waiter.resolve(this.#grant());
    }
  }
}
