// How long the gateway took over the writes of a phase of overload.bench.ts as the gateway itself
// times them — from the arrival of each request it read to the end of its answer — read from its
// request histogram (`fenced_gateway_request_duration_seconds`) before and after the phase. A
// connection the gateway parks (admission/parking.ts) is not read: its write's wait there is in the
// generator's latency, timed from its scheduled send, and not in this one. The p99 is interpolated
// within its bucket, as Prometheus's histogram_quantile does; the slowest answer is known to its
// bucket's upper bound only.

const HISTOGRAM = "fenced_gateway_request_duration_seconds_bucket";

/** Cumulative counts by upper bound (seconds; Infinity for +Inf), summed over the series read. */
type Buckets = Map<number, number>;

export interface Served {
  /** The p99 of accepted writes (2xx), ms, as the gateway timed them; null when none. */
  readonly acceptedP99Ms: number | null;
  /** The upper bound (ms) of the highest bucket any write's answer fell in (Infinity: above the last bound); null when none. */
  readonly slowestAtMostMs: number | null;
  readonly accepted: number;
}

/** The records writes' histogram of the gateway at `origin` now: accepted (2xx) and every answer. */
export async function readServed(origin: string): Promise<{ accepted: Buckets; all: Buckets }> {
  const text = await (await fetch(`${origin}/metrics`)).text();
  const accepted: Buckets = new Map();
  const all: Buckets = new Map();
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${HISTOGRAM}{`)) continue;
    const labels: Record<string, string | undefined> = Object.fromEntries(
      [...line.matchAll(/(\w+)="([^"]*)"/g)].map((m): [string, string | undefined] => [m[1] ?? "", m[2]]),
    );
    if (labels.route !== "records" || labels.method !== "PUT") continue;
    const le = labels.le === "+Inf" ? Infinity : Number(labels.le);
    const count = Number(line.slice(line.lastIndexOf(" ") + 1));
    all.set(le, (all.get(le) ?? 0) + count);
    if (/^2\d\d$/.test(labels.status ?? "")) accepted.set(le, (accepted.get(le) ?? 0) + count);
  }
  return { accepted, all };
}

/** What the phase between two readings added: its p99 of accepted writes and its slowest answer's bound. */
export function servedBetween(before: Awaited<ReturnType<typeof readServed>>, after: Awaited<ReturnType<typeof readServed>>): Served {
  const delta = (a: Buckets, b: Buckets): [number, number][] =>
    [...b.entries()].map(([le, n]): [number, number] => [le, n - (a.get(le) ?? 0)]).sort((x, y) => x[0] - y[0]);
  const accepted = delta(before.accepted, after.accepted);
  const all = delta(before.all, after.all);
  const total = accepted.at(-1)?.[1] ?? 0;
  let slowest: number | null = null;
  for (let i = 0; i < all.length; i++) if ((all[i]?.[1] ?? 0) > (all[i - 1]?.[1] ?? 0)) slowest = all[i]?.[0] ?? null;
  return {
    acceptedP99Ms: total === 0 ? null : Math.round(quantile(0.99, accepted) * 1000 * 10) / 10,
    slowestAtMostMs: slowest === null ? null : slowest * 1000,
    accepted: total,
  };
}

/** Prometheus's histogram_quantile over cumulative buckets sorted by bound: linear within the bucket the rank falls in. */
function quantile(q: number, buckets: readonly [number, number][]): number {
  const total = buckets.at(-1)?.[1] ?? 0;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (const [le, count] of buckets) {
    if (count >= rank) {
      // Past the last finite bound: the last finite bound is all that is known.
      if (le === Infinity) return lower;
      return lower + (le - lower) * ((rank - below) / Math.max(1, count - below));
    }
    lower = le;
    below = count;
  }
  return lower;
}
