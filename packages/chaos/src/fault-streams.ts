import type { Backend, StoreFaultKind } from "./history.js";
import { STORE_FAULT_KINDS } from "./history.js";
import type { Fault, Link, ScheduleOptions } from "./nemesis.js";
import { hash32, Random } from "./random.js";

/**
 * The faults that come on streams of their own beside the main schedule (nemesis.ts): pauses of the
 * gateway process, faults of the store server, connection resets. Each stream is seeded apart from
 * the main one, so that adding it leaves every fault of the main schedule where the same seed puts it.
 */

export type Unnumbered = Fault extends infer F ? (F extends Fault ? Omit<F, "id"> : never) : never;

/** Mean time between two pauses of the gateway, in TTLs: it stalls every worker at once, so it comes rarely. */
const GATEWAY_PAUSE_GAP_TTLS = 10;

/**
 * Pauses of the gateway process. Gaps are at least 4 TTLs and pauses at most 3, so two never overlap.
 */
export function* gatewayPauses(options: ScheduleOptions): Generator<Unnumbered, never> {
  const rnd = new Random(hash32(options.seed ^ 0x67a7e3a1));
  const gap = GATEWAY_PAUSE_GAP_TTLS * options.ttlMs;
  for (let at = options.ttlMs; ;) {
    at += Math.round(rnd.between(0.4, 1.6) * gap);
    yield { kind: "pause-gateway", at, durationMs: Math.round(rnd.between(1.5, 3) * options.ttlMs) };
  }
}

/** Mean time from the end of one store fault to the start of the next, in TTLs. */
const STORE_FAULT_GAP_TTLS = 8;
/**
 * A store server killed needs a while to come back (PostgreSQL's recovery, radosgw's start,
 * dynalite's start): no other store fault meanwhile. azurite is never killed (history.ts).
 */
const STORE_RESTART_MARGIN_MS: Readonly<Record<Backend, number>> = { postgres: 2_000, s3: 6_000, dynamodb: 2_000, "azure-blob": 0 };

/**
 * Faults of the store server of `backend`, one at a time: a pause (SIGSTOP) of 0.5 to 4 TTLs — the
 * longer ones outlast the store's deadline, so calls in flight must give up with a typed error — or
 * a kill (SIGKILL) restarted with its data after 0.5 to 2 TTLs. The first two are a pause and then,
 * soon after it, a kill, so that a run of a few seconds (the quick modes of the test suite) meets
 * both kinds; after them, pauses come twice as often as kills. A backend that is never killed
 * (Azure Blob: STORE_FAULT_KINDS) gets a pause where the others get a kill, at the same times.
 */
export function* storeFaults(options: ScheduleOptions, backend: Backend): Generator<Unnumbered, never> {
  const rnd = new Random(hash32(options.seed ^ 0x5e0f1a2b));
  const { pause: pauseKind, kill: killKind }: { pause: StoreFaultKind; kill: StoreFaultKind | undefined } = STORE_FAULT_KINDS[backend];
  const gap = STORE_FAULT_GAP_TTLS * options.ttlMs;
  for (let n = 0, at = options.ttlMs; ; n++) {
    at += Math.round(rnd.between(0.4, 1.6) * (n === 1 ? gap / 8 : gap));
    const pause = n === 0 || (n > 1 && rnd.next() < 2 / 3);
    if (pause || killKind === undefined) {
      const durationMs = Math.round(rnd.between(0.5, 4) * options.ttlMs);
      yield { kind: pauseKind, at, durationMs };
      at += durationMs;
    } else {
      const durationMs = Math.round(rnd.between(0.5, 2) * options.ttlMs);
      yield { kind: killKind, at, durationMs };
      at += durationMs + STORE_RESTART_MARGIN_MS[backend];
    }
  }
}

/** Mean time from the end of one skew of radosgw's clock to the start of the next, in TTLs. */
const SKEW_GAP_TTLS = 6;

/**
 * Skews of radosgw's clock: for 2 to 5 TTLs its clock (and so every answer's `Date`) is 4.5 to 14
 * minutes off the machine's, either way — past the 4 minutes from which the AWS SDK marks an error
 * answer `clockSkewCorrected` and retries it, inside the 15 minutes within which S3 accepts a
 * signature's date. A store that let the SDK resend a conditional PUT after such an answer would land
 * it without the fence read each try must follow (PROTOCOL.md, "What the store takes from the SDK").
 */
export function* storeSkews(options: ScheduleOptions): Generator<Unnumbered, never> {
  const rnd = new Random(hash32(options.seed ^ 0x3c1a7d55));
  const gap = SKEW_GAP_TTLS * options.ttlMs;
  for (let at = options.ttlMs; ;) {
    at += Math.round(rnd.between(0.4, 1.6) * gap);
    const durationMs = Math.round(rnd.between(2, 5) * options.ttlMs);
    const skewMs = Math.round(rnd.between(4.5, 14) * 60_000) * (rnd.next() < 0.5 ? -1 : 1);
    yield { kind: "skew-s3", at, durationMs, skewMs };
    at += durationMs;
  }
}

/** Mean time between two connection resets, in TTLs. */
const RESET_GAP_TTLS = 2;

/**
 * Connection resets: every open connection of one worker on one link is cut with a TCP RST, whatever
 * is in flight on it (60 % the store link, else a Redis node's).
 */
export function* connectionResets(options: ScheduleOptions): Generator<Unnumbered, never> {
  const rnd = new Random(hash32(options.seed ^ 0x2e5e7c01));
  const gap = RESET_GAP_TTLS * options.ttlMs;
  for (let at = options.ttlMs; ;) {
    at += Math.round(rnd.between(0.4, 1.6) * gap);
    const link: Link = rnd.next() < 0.6 ? "store" : rnd.int(0, options.redisNodes - 1);
    yield { kind: "reset", at, worker: rnd.int(0, options.workers - 1), link, durationMs: 0 };
  }
}

/** Streams merged in time order (a tie goes to the earlier stream), numbered by position in the merge. */
export function* mergeStreams(streams: readonly Iterator<Unnumbered, never>[]): Generator<Fault, never> {
  const heads = streams.map((s) => s.next().value);
  for (let id = 0; ; id++) {
    let best = 0;
    for (let i = 1; i < heads.length; i++) if ((heads[i]?.at ?? Infinity) < (heads[best]?.at ?? Infinity)) best = i;
    const head = heads[best];
    const stream = streams[best];
    if (head === undefined || stream === undefined) throw new Error("mergeStreams needs at least one stream");
    yield { ...head, id };
    heads[best] = stream.next().value;
  }
}
