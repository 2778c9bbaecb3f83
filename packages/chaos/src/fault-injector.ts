import type { RedisNodeHandle } from "@fenced/servers";
import type { DelayProxy } from "./delay-proxy.js";
import { noFaults, type FaultKind, type NemesisEvent } from "./history.js";
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
}

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

  /** An armed worker reported that it is between its read and its write, and waits: stop it there. */
  reachedRmw(worker: number, fault: number, mono: number): void {
    const armed = this.armed.get(fault);
    if (armed !== undefined) clearTimeout(armed.timer);
    this.armed.delete(fault);
    this.started["pause-in-rmw"]++;
    const durationMs = armed?.fault.durationMs ?? 2 * this.ttlMs;
    this.emit(fault, "pause-in-rmw", `worker ${worker}`, "start", worker, mono);
    this.targets.pauseWorker(worker);
    // Even after stop(): a worker waiting for "continue" must always get it.
    this.hold(fault, this.stopped ? 0 : durationMs, () => {
      this.targets.releaseWorker(worker, fault);
      this.targets.resumeWorker(worker);
      this.emit(fault, "pause-in-rmw", `worker ${worker}`, "end", worker);
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
    await Promise.allSettled(ending.map(([, a]) => a.end()));
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
        this.track(this.apply(fault));
        this.scheduleNext();
      },
      Math.max(0, fault.at - this.now()),
    );
  }

  private track(work: Promise<void>): void {
    const p = work.catch(() => undefined).finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
  }

  private nodeNames(): string[] {
    return this.targets.redis.map((n) => n.name);
  }

  private async apply(fault: Fault): Promise<void> {
    const target = describeTarget(fault, this.nodeNames(), this.targets.linkName);
    switch (fault.kind) {
      case "pause-worker": {
        this.targets.pauseWorker(fault.worker);
        this.began(fault, target, fault.worker);
        this.hold(fault.id, fault.durationMs, () => {
          this.targets.resumeWorker(fault.worker);
          this.emit(fault.id, fault.kind, target, "end", fault.worker);
        });
        return;
      }
      case "pause-in-rmw": {
        const windowMs = 2 * this.ttlMs;
        this.targets.armPauseInRmw(fault.worker, fault.id, this.now() + windowMs);
        const timer = setTimeout(() => {
          if (!this.armed.delete(fault.id)) return;
          this.missedCount++;
          this.emit(fault.id, fault.kind, target, "missed", fault.worker);
        }, windowMs);
        this.armed.set(fault.id, { timer, fault });
        return;
      }
      case "pause-redis": {
        const node = this.node(fault.node);
        if (!node.running) return this.miss(fault, target);
        node.pause();
        this.began(fault, target);
        this.hold(fault.id, fault.durationMs, () => {
          if (node.paused) node.resume();
          this.emit(fault.id, fault.kind, target, "end");
        });
        return;
      }
      case "kill-redis":
      case "wipe-redis": {
        const node = this.node(fault.node);
        if (!node.running) return this.miss(fault, target);
        this.began(fault, target);
        await node.kill();
        this.hold(fault.id, fault.durationMs, async () => {
          // A wiped node comes back with an empty data directory: every counter it held is gone.
          await node.restart({ keepData: fault.kind === "kill-redis" });
          this.emit(fault.id, fault.kind, target, "end");
        });
        return;
      }
      case "clock-jump": {
        const offset = (this.clockOffsets.get(fault.node) ?? 0) + fault.jumpMs;
        this.clockOffsets.set(fault.node, offset);
        this.node(fault.node).setClockOffsetMs(offset);
        this.began(fault, target);
        this.emit(fault.id, fault.kind, target, "end");
        return;
      }
      case "pause-gateway": {
        const gateway = this.targets.gateway;
        if (gateway === undefined) return this.miss(fault, target);
        gateway.pause();
        this.began(fault, target);
        this.hold(fault.id, fault.durationMs, () => {
          gateway.resume();
          this.emit(fault.id, fault.kind, target, "end");
        });
        return;
      }
      case "delay": {
        const remove = this.targets.proxy(fault.worker, fault.link).addDelay(fault.directions, fault.delayMs);
        this.began(fault, target, fault.worker);
        this.hold(fault.id, fault.durationMs, () => {
          remove();
          this.emit(fault.id, fault.kind, target, "end", fault.worker);
        });
        return;
      }
    }
  }

  private node(index: number): RedisNodeHandle {
    const node = this.targets.redis[index];
    if (node === undefined) throw new Error(`fault names Redis node ${index}, which does not exist`);
    return node;
  }

  private began(fault: Fault, target: string, worker?: number): void {
    this.started[fault.kind]++;
    this.emit(fault.id, fault.kind, target, "start", worker);
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
    if (this.stopped) {
      this.track(once());
      return;
    }
    const timer = setTimeout(() => this.track(once()), ms);
    this.active.set(id, { timer, end: once });
  }

  private emit(fault: number, kind: FaultKind, target: string, phase: NemesisEvent["phase"], worker?: number, mono?: number): void {
    const base = { type: "nemesis" as const, fault, kind, target, phase, mono: mono ?? this.now(), wall: Date.now() };
    this.record(worker === undefined ? base : { ...base, worker });
  }
}
