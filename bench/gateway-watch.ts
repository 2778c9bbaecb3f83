// What admission control did during a phase of overload.bench.ts, read from the gateway's /metrics
// every SAMPLE_EVERY_MS: the event loop's delay and utilization, the fair share, the records family's limit, in flight
// and queue, the connections parked, the PostgreSQL pool's busy connections and waiting calls, the records puts' mean time, and refusals by
// reason since the previous sample. One scrape costs the gateway about a
// millisecond, so the samples are few and the figures they give are what an operator's dashboard sees.
import { setTimeout as delay } from "node:timers/promises";

const SAMPLE_EVERY_MS = 500;
const PUTS = "fenced_gateway_store_duration_seconds";
const PUT_LABELS = '{store="records",op="put",outcome="ok"}';

export interface Sample {
  /** ms since the watch started. */
  readonly t: number;
  readonly loopDelayMs: number;
  /** The share of its time the loop works (0 to 1): the fair share binds only while it is high. */
  readonly loopUtilization: number;
  /** Requests per second per API key; null: nobody held back (+Inf). */
  readonly fairShare: number | null;
  readonly limit: number;
  readonly inflight: number;
  readonly queued: number;
  /** Connections not read until there is room (admission/parking.ts; NaN for a build without). */
  readonly parked: number;
  /** The records store's PostgreSQL pool: connections busy, and calls waiting for one. */
  readonly poolBusy: number;
  readonly poolWaiting: number;
  /** The mean time of the records store's puts that ended ok since the previous sample (ms; null: none did), pool wait included. */
  readonly putMs: number | null;
  /** Refusals since the previous sample, by reason (queue_full, queue_timeout, evicted, event_loop_delay). */
  readonly shed: Readonly<Record<string, number>>;
}

/** Samples `origin`'s /metrics until the returned stop() is called; stop() gives the samples. */
export function watchGateway(origin: string): { stop(): Promise<Sample[]> } {
  const samples: Sample[] = [];
  const t0 = performance.now();
  let running = true;
  let shedBefore: Record<string, number> = {};
  let putsBefore = { sum: 0, count: 0 };
  const loop = (async () => {
    while (running) {
      const text = await fetch(`${origin}/metrics`)
        .then((r) => r.text())
        .catch(() => "");
      if (text !== "") {
        const shedNow = shedByReason(text);
        const puts = { sum: value(text, `${PUTS}_sum${PUT_LABELS}`), count: value(text, `${PUTS}_count${PUT_LABELS}`) };
        const ended = puts.count - putsBefore.count;
        samples.push({
          t: Math.round(performance.now() - t0),
          loopDelayMs: Math.round(value(text, "fenced_gateway_event_loop_delay_seconds") * 1000),
          loopUtilization: Math.round(value(text, "fenced_gateway_event_loop_utilization") * 100) / 100,
          fairShare: finiteOrNull(value(text, "fenced_gateway_admission_fair_share")),
          limit: value(text, 'fenced_gateway_admission_limit{route="records"}'),
          inflight: value(text, 'fenced_gateway_admission_inflight{route="records"}'),
          queued: value(text, 'fenced_gateway_admission_queued{route="records"}'),
          parked: value(text, "fenced_gateway_admission_parked_connections"),
          poolBusy: value(text, 'fenced_gateway_postgres_pool{state="busy"}'),
          poolWaiting: value(text, 'fenced_gateway_postgres_pool{state="waiting"}'),
          putMs: ended > 0 ? Math.round(((puts.sum - putsBefore.sum) / ended) * 10_000) / 10 : null,
          shed: Object.fromEntries(Object.entries(shedNow).map(([r, n]) => [r, n - (shedBefore[r] ?? 0)])),
        });
        shedBefore = shedNow;
        putsBefore = puts;
      }
      await delay(SAMPLE_EVERY_MS);
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return samples;
    },
  };
}

function value(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? Number.NaN : Number(line.slice(series.length + 1));
}

function finiteOrNull(n: number): number | null {
  return Number.isFinite(n) ? Math.round(n) : null;
}

function shedByReason(text: string): Record<string, number> {
  const byReason: Record<string, number> = {};
  for (const line of text.split("\n")) {
    const m = /^fenced_gateway_requests_shed_total\{.*reason="([a-z_]+)".*\} (\d+)/.exec(line);
    if (m?.[1] !== undefined) byReason[m[1]] = (byReason[m[1]] ?? 0) + Number(m[2]);
  }
  return byReason;
}
