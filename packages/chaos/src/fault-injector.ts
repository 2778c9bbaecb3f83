import type { RedisNodeHandle, ServerFaults } from "@fenced/servers";
import type { DelayProxy } from "./delay-proxy.js";
import { noFaults, type FaultKind, type NemesisEvent, type StoreFaultKind } from "./history.js";
import { describeTarget, type Fault, type Link } from "./nemesis.js";

/** What the injector acts on; run.ts provides it (and tests can fake it). */
export interface FaultTargets {
  /** SIGSTOP; nested pauses of one worker resume only when the last one ends. */
  pauseWorker(worker: number): void;
  resumeWorker(worker: number): void;
  /** Asks the worker to report (and wait) when it is next between a read and a write, if before `untilMono`. */
  armPauseInRmw(worker: number, fault: number, untilMono: number): void;
  /** Lets a worker that reported being between read and write go on (sent before its SIGCONT). */
  releaseWorker(worker: number, fault: number): void;
  readonly redis: readonly RedisNodeHandle[];
  proxy(worker: number, link: Link): DelayProxy;
  /** The gateway process the workers go through, if any: SIGSTOP / SIGCONT. */
  readonly gateway?: { pause(): void; resume(): void };
  /** What a delay on `link` really holds back, when that is not the link itself (through a gateway: "gateway"). */
  readonly linkName?: (link: Link) => string;
  /** The store server of the run's backend, when it was started for faults. */
  readonly store?: ServerFaults;
  /** radosgw's clock, when it was started under the clock shim (skew-s3). */
  readonly storeClock?: { setOffsetMs(ms: number): void };
  /**
   * Resets the connections a reset of `worker`'s `link` acts on (by default that link's proxy) and
   * names them ("worker 2 → store", "gateway → store").
   */
  readonly reset?: (worker: number, link: Link) => string;
}

type Extra = Pick<NemesisEvent, "worker" | "stalls" | "delayMs" | "directions">;

interface Active {
  timer: NodeJS.Timeout | undefined;
  end: () => Promise<void>;
}

/**
 * Plays a fault schedule against live targets: each fault starts at its offset from the run's
 * origin and is undone after its duration. stop() undoes every fault still active (resumes,
 * restarts, removes delays) so that the workers can finish and the final read sees a healthy cluster.
 */
export class FaultInjector {
  private readonly active = new Map<number, Active>();
  private readonly inFlight = new Set<Promise<void>>();
  private readonly armed = new Map<number, { timer: NodeJS.Timeout; fault: Fault }>();
  private readonly clockOffsets = new Map<number, number>();
  private readonly started: Record<FaultKind, number> = noFaults();
  private missedCount = 0;
  /** A store fault changing the server's state (a kill until its restart answered): another store fault meanwhile is missed. */
  private storeBusy = false;
  private readonly errors: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly schedule: Iterator<Fault>,
    private readonly targets: FaultTargets,
    private readonly record: (event: NemesisEvent) => void,
    /** ms since the run's origin, on the monotonic clock. */
    private readonly now: () => number,
    private readonly ttlMs: number,
  ) {}

  start(): void {
    this.scheduleNext();
  }

  /** Faults that took effect, by kind. */
  get faults(): Readonly<Record<FaultKind, number>> {
    return { ...this.started };
  }

  /** Scheduled faults that found nothing to act on (an armed worker that never got to its write). */
  get missed(): number {
    return this.missedCount;
  }

  /** Faults that could not be applied or undone (a store server that did not restart): the run is not what it claims. */
  get failures(): readonly string[] {
    return [...this.errors];
  }

  /** An armed worker reported that it is between its read and its write, and waits: stop it there. */
  reachedRmw(worker: number, fault: number, mono: number): void {
    const armed = this.armed.get(fault);
    if (armed !== undefined) clearTimeout(armed.timer);
    this.armed.delete(fault);
    this.started["pause-in-rmw"]++;
    const durationMs = armed?.fault.durationMs ?? 2 * this.ttlMs;
    const extra: Extra = { worker, stalls: "worker" };
    this.emit(fault, "pause-in-rmw", `worker ${worker}`, "start", extra, mono);
    this.targets.pauseWorker(worker);
    // Even after stop(): a worker waiting for "continue" must always get it.
    this.hold(fault, this.stopped ? 0 : durationMs, () => {
      this.targets.releaseWorker(worker, fault);
      this.targets.resumeWorker(worker);
      this.emit(fault, "pause-in-rmw", `worker ${worker}`, "end", extra);
    });
  }

  /** Stops scheduling and undoes every active fault; resolves once restarted nodes answer again. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    for (const { timer } of this.armed.values()) clearTimeout(timer);
    this.armed.clear();
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
    const ending = [...this.active.entries()];
    this.active.clear();
    for (const [, a] of ending) clearTimeout(a.timer);
    await Promise.all(
      ending.map(([id, a]) =>
        a.end().catch((err: unknown) => void this.errors.push(`undoing fault ${id}: ${err instanceof Error ? err.message : String(err)}`)),
      ),
    );
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  private scheduleNext(): void {
    if (this.stopped) return;
    const step = this.schedule.next();
    if (step.done === true) return;
    const fault = step.value;
    this.timer = setTimeout(
      () => {
        if (this.stopped) return;
        this.track(this.apply(fault), `${fault.kind} (fault ${fault.id})`);
        this.scheduleNext();
      },
      Math.max(0, fault.at - this.now()),
    );
  }

  private track(work: Promise<void>, what?: string): void {
    const p = work
      .catch((err: unknown) => void this.errors.push(`${what ?? "a fault"}: ${err instanceof Error ? err.message : String(err)}`))
      .finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
  }

  private nodeNames(): string[] {
    return this.targets.redis.map((n) => n.name);
  }

  private async apply(fault: Fault): Promise<void> {
    const target = describeTarget(fault, this.nodeNames(), this.targets.linkName);
    switch (fault.kind) {
      case "pause-worker":
      case "pause-in-rmw":
        return this.applyToWorker(fault, target);
      case "pause-redis":
      case "kill-redis":
      case "wipe-redis":
      case "clock-jump":
        return this.applyToRedis(fault, target);
      case "delay":
      case "reset":
        return this.applyToLink(fault, target);
      case "pause-gateway": {
        const gateway = this.targets.gateway;
        if (gateway === undefined) return this.miss(fault, target);
        gateway.pause();
        this.began(fault, target, { stalls: "gateway" });
        this.hold(fault.id, fault.durationMs, () => {
          gateway.resume();
          this.emit(fault.id, fault.kind, target, "end", { stalls: "gateway" });
        });
        return;
      }
      case "pause-postgres":
      case "pause-s3":
      case "pause-dynamodb":
      case "pause-azure-blob":
      case "kill-postgres":
      case "kill-s3":
      case "kill-dynamodb":
        return this.applyToStore(fault, target);
      case "skew-s3": {
        const clock = this.targets.storeClock;
        if (clock === undefined) return this.miss(fault, target);
        clock.setOffsetMs(fault.skewMs);
        this.began(fault, target);
        this.hold(fault.id, fault.durationMs, () => {
          clock.setOffsetMs(0);
          this.emit(fault.id, fault.kind, target, "end");
        });
        return;
      }
    }
  }

  private applyToWorker(fault: Extract<Fault, { kind: "pause-worker" | "pause-in-rmw" }>, target: string): void {
    if (fault.kind === "pause-in-rmw") {
      const windowMs = 2 * this.ttlMs;
      this.targets.armPauseInRmw(fault.worker, fault.id, this.now() + windowMs);
      const timer = setTimeout(() => {
        if (!this.armed.delete(fault.id)) return;
        this.missedCount++;
        this.emit(fault.id, fault.kind, target, "missed", { worker: fault.worker });
      }, windowMs);
      this.armed.set(fault.id, { timer, fault });
      return;
    }
    const extra: Extra = { worker: fault.worker, stalls: "worker" };
    this.targets.pauseWorker(fault.worker);
    this.began(fault, target, extra);
    this.hold(fault.id, fault.durationMs, () => {
      this.targets.resumeWorker(fault.worker);
      this.emit(fault.id, fault.kind, target, "end", extra);
    });
  }

  private async applyToRedis(
    fault: Extract<Fault, { kind: "pause-redis" | "kill-redis" | "wipe-redis" | "clock-jump" }>,
    target: string,
  ): Promise<void> {
    const node = this.node(fault.node);
    if (fault.kind === "clock-jump") {
      const offset = (this.clockOffsets.get(fault.node) ?? 0) + fault.jumpMs;
      this.clockOffsets.set(fault.node, offset);
      node.setClockOffsetMs(offset);
      this.began(fault, target);
      this.emit(fault.id, fault.kind, target, "end");
      return;
    }
    if (!node.running) return this.miss(fault, target);
    if (fault.kind === "pause-redis") {
      node.pause();
      this.began(fault, target);
      this.hold(fault.id, fault.durationMs, () => {
        if (node.paused) node.resume();
        this.emit(fault.id, fault.kind, target, "end");
      });
      return;
    }
    this.began(fault, target);
    await node.kill();
    this.hold(fault.id, fault.durationMs, async () => {
      // A wiped node comes back with an empty data directory: every counter it held is gone.
      await node.restart({ keepData: fault.kind === "kill-redis" });
      this.emit(fault.id, fault.kind, target, "end");
    });
  }

  private applyToLink(fault: Extract<Fault, { kind: "delay" | "reset" }>, target: string): void {
    if (fault.kind === "reset") {
      const reset = this.targets.reset;
      const name =
        reset === undefined ? (this.targets.proxy(fault.worker, fault.link).resetConnections(), target) : reset(fault.worker, fault.link);
      this.began(fault, name, { worker: fault.worker });
      this.emit(fault.id, fault.kind, name, "end", { worker: fault.worker });
      return;
    }
    // A delay on a link to the gateway holds a call outside the deadline the gateway keeps: liveness allows for it.
    const toGateway = this.targets.linkName?.(fault.link) === "gateway";
    const extra: Extra = {
      worker: fault.worker,
      ...(toGateway ? { stalls: "gateway-link" as const, delayMs: fault.delayMs, directions: fault.directions } : {}),
    };
    const remove = this.targets.proxy(fault.worker, fault.link).addDelay(fault.directions, fault.delayMs);
    this.began(fault, target, extra);
    this.hold(fault.id, fault.durationMs, () => {
      remove();
      this.emit(fault.id, fault.kind, target, "end", extra);
    });
  }

  /** A store fault finds the server as the last one left it, or is missed: one at a time. */
  private async applyToStore(fault: Extract<Fault, { kind: StoreFaultKind }>, target: string): Promise<void> {
    const store = this.targets.store;
    if (store === undefined || this.storeBusy || !store.running || store.paused) return this.miss(fault, target);
    this.storeBusy = true;
    if (fault.kind.startsWith("pause-")) {
      store.pause();
      this.began(fault, target);
      this.hold(fault.id, fault.durationMs, () => {
        if (store.paused) store.resume();
        this.storeBusy = false;
        this.emit(fault.id, fault.kind, target, "end");
      });
      return;
    }
    this.began(fault, target);
    try {
      await store.kill();
    } catch (err) {
      this.storeBusy = false;
      throw err;
    }
    this.hold(fault.id, fault.durationMs, async () => {
      try {
        // With its data: PostgreSQL recovers its committed transactions, radosgw finds the cluster's objects, dynalite its LevelDB.
        await store.restart();
      } finally {
        this.storeBusy = false;
        this.emit(fault.id, fault.kind, target, "end");
      }
    });
  }

  private node(index: number): RedisNodeHandle {
    const node = this.targets.redis[index];
    if (node === undefined) throw new Error(`fault names Redis node ${index}, which does not exist`);
    return node;
  }

  private began(fault: Fault, target: string, extra: Extra = {}): void {
    this.started[fault.kind]++;
    this.emit(fault.id, fault.kind, target, "start", extra);
  }

  private miss(fault: Fault, target: string): void {
    this.missedCount++;
    this.emit(fault.id, fault.kind, target, "missed");
  }

  /** Runs `end` after `ms`, or at stop(), whichever comes first; exactly once. */
  private hold(id: number, ms: number, end: () => Promise<void> | void): void {
    let done = false;
    const once = async (): Promise<void> => {
      if (done) return;
      done = true;
      this.active.delete(id);
      await end();
    };
    const what = `undoing fault ${id}`;
    if (this.stopped) {
      this.track(once(), what);
      return;
    }
    const timer = setTimeout(() => this.track(once(), what), ms);
    this.active.set(id, { timer, end: once });
  }

  private emit(fault: number, kind: FaultKind, target: string, phase: NemesisEvent["phase"], extra: Extra = {}, mono?: number): void {
    this.record({ type: "nemesis", fault, kind, target, phase, mono: mono ?? this.now(), wall: Date.now(), ...extra });
  }
}
