import { Counter, Gauge, type Registry } from "prom-client";
import type { ShedReason } from "../vocabulary/shed-reasons.js";
import type { Admission, Priority } from "./admission.js";
import type { FairShare } from "./fair-share.js";
import type { LoopDelay } from "./loop-delay.js";

/** What admission control did, in the gateway's registry: refusals by route family, priority and reason; each gate's state. */
export class AdmissionMetrics {
  readonly #shed: Counter<"route" | "priority" | "reason">;
  #gates: ReadonlyMap<string, Admission> = new Map();
  #loop: LoopDelay | undefined;
  #fair: FairShare | undefined;
  #parking: { readonly size: number } | undefined;

  constructor(registry: Registry) {
    const registers = [registry];
    this.#shed = new Counter({
      name: "fenced_gateway_requests_shed_total",
      help: "Requests refused by admission control (503 overloaded) before any lock or store work, by route family, priority (acquire, work) and reason (queue_full, queue_timeout, evicted, event_loop_delay)",
      labelNames: ["route", "priority", "reason"],
      registers,
    });
    // collect() runs with the gauge as `this`: the gates and the loop are read through these.
    const gates = (): ReadonlyMap<string, Admission> => this.#gates;
    const loop = (): LoopDelay | undefined => this.#loop;
    const fair = (): FairShare | undefined => this.#fair;
    const parking = (): { readonly size: number } | undefined => this.#parking;
    const gauge = (name: string, help: string, read: (gate: Admission) => number): void => {
      new Gauge({
        name,
        help,
        labelNames: ["route"],
        registers,
        collect() {
          for (const [route, gate] of gates()) this.set({ route }, read(gate));
        },
      });
    };
    gauge("fenced_gateway_admission_limit", "Each route family's concurrency limit now (adaptive; fixed for objects)", (g) => g.limit);
    gauge("fenced_gateway_admission_inflight", "Requests of each route family admitted and not yet answered", (g) => g.inflight);
    gauge("fenced_gateway_admission_queued", "Requests of each route family waiting for a slot", (g) => g.queued);
    new Gauge({
      name: "fenced_gateway_event_loop_delay_seconds",
      help: "How late the event loop runs on average, less any time its thread waited for a CPU: throttled for a CPU quota, or in the run queue while another process had it (past --max-event-loop-delay-ms at every tick over 100 ms, while requests waited for a slot at every request judged over 100 ms and the loop works at least 0.8 of its time, each API key is held to a fair share)",
      registers,
      collect() {
        const delay = loop();
        if (delay !== undefined) this.set(delay.ms / 1000);
      },
    });
    new Gauge({
      name: "fenced_gateway_event_loop_utilization",
      help: "Of the time the event loop runs on a CPU or waits for I/O, the share it runs, 0 to 1, over about a second of that time (time it is stopped or waits for a CPU in the middle of its work is in neither; the fair share binds only while the loop is late and this is at least 0.8: a loop late while it works less is short of a CPU another process has)",
      registers,
      collect() {
        const delay = loop();
        if (delay !== undefined) this.set(delay.utilization);
      },
    });
    new Gauge({
      name: "fenced_gateway_admission_fair_share",
      help: "Requests per second each API key is let in while the event loop is late and working (+Inf: nobody is held back)",
      registers,
      // With admission control off nobody is held back either.
      collect() {
        this.set(fair()?.share ?? Infinity);
      },
    });
    new Gauge({
      name: "fenced_gateway_admission_parked_connections",
      help: "Keep-alive connections not read until there is room for their next request: a refused request's, and a served one's while its API key has at least its share of its route family's parked ones (each read again in turn across API keys, after the refusal's Retry-After at most)",
      registers,
      collect() {
        this.set(parking()?.size ?? 0);
      },
    });
  }

  /** The gates, the loop, the fair share and the parked connections to report (called once, when admission control is on). */
  watch(gates: ReadonlyMap<string, Admission>, loop: LoopDelay, fair: FairShare, parking: { readonly size: number }): void {
    this.#gates = gates;
    this.#loop = loop;
    this.#fair = fair;
    this.#parking = parking;
  }

  shed(route: string, priority: Priority, reason: ShedReason): void {
    this.#shed.inc({ route, priority, reason: reason.replaceAll("-", "_") });
  }
}
