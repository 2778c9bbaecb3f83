// Open-loop latency of the gateway and of the anchors, on the servers gateway.bench.ts started:
// - the goal line: each side at half its closed-loop throughput (p99 < 20 ms for the gateway);
// - the same rates for all: the gateway's credential writes and both anchors at 1/8, 1/4 and 1/2 of
//   the gateway's credential throughput, so that a tail that grows with the load on this machine's
//   cores shows apart from one the gateway has at any load.
// Writes arrive at a fixed rate over the same 64 connections, each timed from its scheduled start, so
// that a stall delays every write behind it (no coordinated omission). Each phase runs in rounds in a
// rotating order, each side's latencies pooled, so that a stall of the machine (a checkpoint, another
// process) is not charged to one side.
import { emit, latencyOf, openLoop, type Latency, type Op } from "./measure.js";
import type { ServerProcess } from "./server-process.js";

export type OpenImpl = "gateway" | "gateway-credential" | "express-pg" | "node-http-pg";

export interface LatencyBench {
  readonly impls: Readonly<Record<OpenImpl, Op>>;
  readonly processOf: Readonly<Record<OpenImpl, ServerProcess>>;
  /** Closed-loop throughput (writes/s, median of the rounds) of the plain-header and the credential writes. */
  readonly plainOpsPerSec: number;
  readonly credentialOpsPerSec: number;
  readonly durationMs: number;
  readonly setting: Readonly<Record<string, unknown>>;
}

const ROUNDS = 3;
const SWEEP: readonly number[] = [1 / 8, 1 / 4, 1 / 2];
const SWEPT: readonly OpenImpl[] = ["gateway-credential", "express-pg", "node-http-pg"];

/** Runs every impl at its rate for `durationMs` in all, in ROUNDS interleaved rounds; the pooled latencies of each. */
async function phase(b: LatencyBench, rates: Partial<Record<OpenImpl, number>>): Promise<Partial<Record<OpenImpl, Latency>>> {
  const impls = Object.keys(rates) as OpenImpl[];
  const pooled = Object.fromEntries(impls.map((impl) => [impl, [] as number[]])) as Record<OpenImpl, number[]>;
  for (let round = 0; round < ROUNDS; round++) {
    for (let k = 0; k < impls.length; k++) {
      const impl = impls[(round + k) % impls.length] as OpenImpl;
      await openLoop(b.impls[impl], rates[impl] as number, b.durationMs / ROUNDS, pooled[impl]);
    }
  }
  return Object.fromEntries(impls.map((impl) => [impl, latencyOf(pooled[impl])]));
}

const arrival = `open loop, fixed interval, timed from the scheduled start; ${ROUNDS} interleaved rounds pooled`;

export async function latencyBench(b: LatencyBench): Promise<void> {
  const atHalf = (ops: number): number => Math.max(100, Math.round(ops / 2));
  // The goal: the plain-header writes at half their throughput; the credential writes and each anchor at half the credential writes'.
  const rates: Record<OpenImpl, number> = {
    gateway: atHalf(b.plainOpsPerSec),
    "gateway-credential": atHalf(b.credentialOpsPerSec),
    "express-pg": atHalf(b.credentialOpsPerSec),
    "node-http-pg": atHalf(b.credentialOpsPerSec),
  };
  for (const impl of Object.keys(rates) as OpenImpl[]) b.processOf[impl].resetPeak();
  const goal = await phase(b, rates);
  for (const impl of Object.keys(rates) as OpenImpl[]) {
    const latency = goal[impl] as Latency;
    const judged = impl === "gateway" || impl === "gateway-credential";
    emit({
      bench: "gateway-postgres-put-latency",
      impl,
      ...b.setting,
      ratesPerSec: rates[impl],
      arrival,
      ...latency,
      ...(judged ? { goal: "p99 < 20 ms", met: latency.p99Ms < 20 } : {}),
      serverPeakRssMb: b.processOf[impl].rssMb().peak,
    });
  }
  // The same rates for the credential writes and the anchors, from light to half the gateway's throughput.
  for (const fraction of SWEEP) {
    const rate = Math.max(100, Math.round(b.credentialOpsPerSec * fraction));
    const cpu0 = Object.fromEntries(SWEPT.map((impl) => [impl, b.processOf[impl].cpuSeconds()]));
    await eventLoopDelay(b.processOf.gateway.port); // a scrape resets the gateway's event-loop delay histogram
    const swept = await phase(b, Object.fromEntries(SWEPT.map((impl) => [impl, rate])));
    const gatewayEventLoop = await eventLoopDelay(b.processOf.gateway.port);
    emit({
      bench: "gateway-postgres-put-latency-by-rate",
      ...b.setting,
      fraction,
      ratePerSec: rate,
      of: "the gateway's credential writes/s (closed loop); every side at this one rate",
      arrival,
      // The gateway's own event loop over the phase (its /metrics, prom-client's default metrics): how
      // long it was kept from answering anything, whatever the cause (its code, its garbage collector).
      // Sampled by a 10 ms timer, whose interval the figures include: 10 ms is no delay at all.
      gatewayEventLoop,
      ...Object.fromEntries(
        SWEPT.map((impl) => {
          const l = swept[impl] as Latency;
          // The share of one core the server process used while it ran at this rate.
          const coreShare = (b.processOf[impl].cpuSeconds() - (cpu0[impl] as number)) / (b.durationMs / 1000);
          return [impl, { p50Ms: l.p50Ms, p99Ms: l.p99Ms, maxMs: l.maxMs, serverCores: Number(coreShare.toFixed(2)) }];
        }),
      ),
    });
  }
}

/** The gateway's event-loop delay since its last scrape (ms): p99 and max, from its /metrics. */
async function eventLoopDelay(port: number): Promise<{ p99Ms: number; maxMs: number }> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const seconds = (name: string): number =>
    Number(new RegExp(`^fenced_gateway_nodejs_eventloop_lag_${name}_seconds (\\S+)$`, "m").exec(text)?.[1] ?? NaN);
  return { p99Ms: Number((seconds("p99") * 1000).toFixed(2)), maxMs: Number((seconds("max") * 1000).toFixed(2)) };
}
