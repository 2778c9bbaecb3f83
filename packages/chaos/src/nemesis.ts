import type { Directions } from "./delay-proxy.js";
import { connectionResets, gatewayPauses, mergeStreams, storeFaults, storeSkews, type Unnumbered } from "./fault-streams.js";
import { STORE_FAULT_KINDS, type Backend, type FaultKind, type StoreFaultKind } from "./history.js";
import { Random } from "./random.js";

/**
 * The nemesis's schedule: a seeded, endless sequence of faults at times relative to the start of a
 * run. It depends on the seed and the shape of the cluster only, never on what happens during the
 * run, so the same seed gives the same faults at the same offsets to every configuration, and a run
 * can be replayed. A run consumes the schedule until its operations are done.
 */

interface FaultBase {
  /** Position in the schedule, from 0. */
  readonly id: number;
  /** ms after the run's start. */
  readonly at: number;
  /** How long the fault lasts (0 for the instantaneous clock jump). */
  readonly durationMs: number;
}

/** Where a delay applies: between a worker and the store, or between a worker and Redis node `n`. */
export type Link = "store" | number;

export type Fault =
  /** SIGSTOP a worker wherever it is, SIGCONT after durationMs (longer than the TTL). */
  | (FaultBase & { readonly kind: "pause-worker"; readonly worker: number })
  /**
   * SIGSTOP a worker at the worst moment: holding a lease, after its read, before its write (a GC
   * pause in the middle of a read-modify-write). The worker is armed, reports reaching that point
   * within the fault's window and waits there to be stopped; a random SIGSTOP lands there only by luck.
   */
  | (FaultBase & { readonly kind: "pause-in-rmw"; readonly worker: number })
  /** SIGSTOP a Redis node (it keeps its connections and answers nothing), SIGCONT after durationMs. */
  | (FaultBase & { readonly kind: "pause-redis"; readonly node: number })
  /** SIGKILL a Redis node, restart it with its data after durationMs. */
  | (FaultBase & { readonly kind: "kill-redis"; readonly node: number })
  /** SIGKILL a Redis node and restart it after durationMs with an empty data directory: its counters are gone. Comes in wipe rounds (below). */
  | (FaultBase & { readonly kind: "wipe-redis"; readonly node: number })
  /** Moves one Redis node's wall clock forward by jumpMs (cumulative); its keys expire early. */
  | (FaultBase & { readonly kind: "clock-jump"; readonly node: number; readonly jumpMs: number })
  /** Holds back one worker's packets on one link by delayMs, for durationMs. */
  | (FaultBase & {
      readonly kind: "delay";
      readonly worker: number;
      readonly link: Link;
      readonly directions: Directions;
      readonly delayMs: number;
    })
  /** Resets (TCP RST) every open connection of one worker on one link, whatever is in flight on it; instantaneous. */
  | (FaultBase & { readonly kind: "reset"; readonly worker: number; readonly link: Link })
  /** SIGSTOP the gateway process (only when the workers go through one), SIGCONT after durationMs (longer than the TTL). */
  | (FaultBase & { readonly kind: "pause-gateway" })
  /** pause-…: SIGSTOP the store server, SIGCONT after durationMs; kill-…: SIGKILL it, restart it with its data after durationMs (never azurite's). */
  | (FaultBase & { readonly kind: StoreFaultKind })
  /**
   * Moves radosgw's wall clock skewMs (either way) from the machine's for durationMs: every answer's
   * `Date` says so, and the SDK's clock-skew correction reads it. Inside S3's 15-minute signature window.
   */
  | (FaultBase & { readonly kind: "skew-s3"; readonly skewMs: number });

export interface ScheduleOptions {
  readonly seed: number;
  readonly ttlMs: number;
  readonly workers: number;
  readonly redisNodes: number;
  /** The one Redis node started with clock control. */
  readonly clockNode: number;
  /** Mean time between the starts of two faults; default 0.8 × TTL. */
  readonly meanGapMs?: number;
  /**
   * The workers go through a gateway process: pauses of that process are added, drawn from a stream
   * of their own, so that every other fault stays exactly where the same seed puts it without one.
   */
  readonly gateway?: boolean;
  /** The store server of this backend is paused and killed, on a stream of its own too; none if undefined. */
  readonly store?: Backend;
  /** Connection resets, on a stream of their own; default true. */
  readonly resets?: boolean;
}

/**
 * Relative frequencies. The targeted pause is the one that makes stale writers; the wipe round the
 * one that makes the lock repeat tokens; the rest stress liveness and ordering.
 */
const WEIGHTS: Readonly<Record<Exclude<FaultKind, "pause-gateway" | "reset" | StoreFaultKind | "skew-s3">, number>> = {
  "pause-in-rmw": 3,
  "pause-worker": 2,
  delay: 2,
  "pause-redis": 1,
  "kill-redis": 1,
  "wipe-redis": 1,
  "clock-jump": 1,
};

/** A restarted node needs a moment to come back; it stays counted as faulty that much longer. */
const RESTART_MARGIN_MS = 1_000;
/**
 * A wipe round wipes the majority as the minority restarts, with no time between. Any time between
 * is a window in which every node is up and the minority is behind: an acquisition that finds fewer
 * than a majority of its granting nodes at the highest counter (another attempt held one of them, or
 * one answered late) publishes its token to the minority and heals it, and the round then repeats no
 * token on that resource. With 400 ms between, a quick S3 run (5 workers on 2 resources) saw one
 * resource of two healed in 3 runs of 6 and, now and then, both: a run that proved nothing. Pairs,
 * where every lease contends with every other, were healed nearly always.
 */
const REJOIN_MS = 0;

type RoundFault = Omit<Extract<Fault, { kind: "kill-redis" | "wipe-redis" }>, "id">;

/**
 * A wipe round makes the lock repeat tokens, and repeat them where they collide at the store.
 * Wiping nodes one at a time changes nothing: the quorum's publish step raises a node that is
 * behind as soon as an acquisition has fewer than a majority at the highest counter. A token repeats
 * only when every node of a granting majority has lost the counters and the nodes that kept them
 * do not answer. So a round:
 *
 * 1. kills the minority (restarting it with its data after `downMs`): the majority goes on handing
 *    out tokens the minority never sees, so the minority's counters fall behind by that many;
 * 2. as the minority restarts (REJOIN_MS), kills the majority at once and restarts it empty: tens of
 *    ms without a majority, the one moment when more than a minority of the nodes is down.
 *
 * The next acquisitions take the highest counter of the minority, which is behind: the lock hands
 * out again, one by one, the tokens it handed out while the minority was down, up to and through
 * the highest the store has accepted, where two holders present the same token.
 * Returns the round's faults in time order, and when its last node is back.
 */
function wipeRound(rnd: Random, at: number, ttlMs: number, redisNodes: number): { faults: RoundFault[]; until: number } {
  const quorum = Math.floor(redisNodes / 2) + 1;
  const order = rnd.shuffle(Array.from({ length: redisNodes }, (_, node) => node));
  const behind = order.slice(quorum);
  // Long enough that the lag outlasts the wipe: every attempt made while the majority restarts
  // advances the minority's counters too (granted there, refused for want of a majority).
  const downMs = Math.round(rnd.between(1.5, 3) * ttlMs);
  const wipeAt = behind.length === 0 ? at : at + downMs + REJOIN_MS;
  const faults: RoundFault[] = [
    ...behind.map((node): RoundFault => ({ kind: "kill-redis", at, node, durationMs: downMs })),
    ...order.slice(0, quorum).map((node): RoundFault => ({ kind: "wipe-redis", at: wipeAt, node, durationMs: 0 })),
  ];
  return { faults, until: wipeAt + RESTART_MARGIN_MS };
}

/**
 * The main schedule, merged in time order with the streams of their own: gateway pauses (with a
 * gateway), store faults (with a backend), radosgw's clock skews (with S3), connection resets (unless turned off). Ids are positions
 * in the merged schedule.
 */
export function* faultSchedule(options: ScheduleOptions): Generator<Fault, never> {
  const streams: Iterator<Unnumbered, never>[] = [mainSchedule(options)];
  if (options.gateway === true) streams.push(gatewayPauses(options));
  if (options.store !== undefined) streams.push(storeFaults(options, options.store));
  if (options.store === "s3") streams.push(storeSkews(options));
  if (options.resets !== false) streams.push(connectionResets(options));
  if (streams.length === 1) return yield* mainSchedule(options);
  return yield* mergeStreams(streams);
}

/** After a wipe round's restart, time for the workers to take the tokens it makes the lock repeat. */
const AFTER_WIPE_MS = 2_000;

/**
 * How long a run must last, however fast its operations go, for its schedule to have played what
 * every run is judged on: the first `wipeRounds` wipe rounds (each wipe, the restart after it, and
 * time for the workers to meet the repeated tokens) and, with a store, the store server's first kill
 * and restart (a server never killed, azurite: its first pause). A run whose operations are done
 * sooner goes on until then (RunEnd, run-end.ts).
 */
export function scheduleCoverageMs(options: ScheduleOptions, wipeRounds = 1): number {
  const wipes: number[] = [];
  const kinds = options.store === undefined ? undefined : STORE_FAULT_KINDS[options.store];
  // A server never killed (azurite): its first pause, and no restart to wait for.
  const kill: FaultKind | undefined = kinds === undefined ? undefined : (kinds.kill ?? kinds.pause);
  const restartMs = kinds?.kill === undefined ? 0 : RESTART_MARGIN_MS;
  let killEnd: number | undefined = kill === undefined ? 0 : undefined;
  const schedule = faultSchedule(options);
  for (let i = 0; i < 100_000 && (wipes.length < wipeRounds || killEnd === undefined); i++) {
    const fault = schedule.next().value;
    // A round wipes its nodes at one instant: one time per round.
    if (fault.kind === "wipe-redis" && !wipes.includes(fault.at) && wipes.length < wipeRounds) wipes.push(fault.at);
    if (fault.kind === kill) killEnd ??= fault.at + fault.durationMs + restartMs;
  }
  const lastWipe = wipes[wipeRounds - 1];
  if (lastWipe === undefined || killEnd === undefined)
    throw new RangeError(`the schedule has fewer than ${wipeRounds} wipe round(s) or no store kill`);
  return Math.max(lastWipe + RESTART_MARGIN_MS + AFTER_WIPE_MS, killEnd);
}

function* mainSchedule(options: ScheduleOptions): Generator<Fault, never> {
  const { ttlMs, workers, redisNodes, clockNode } = options;
  if (workers < 1 || redisNodes < 1 || ttlMs <= 0)
    throw new RangeError("faultSchedule needs ≥ 1 worker, ≥ 1 Redis node and a positive TTL");
  if (clockNode < 0 || clockNode >= redisNodes) throw new RangeError(`clockNode ${clockNode} is not one of the ${redisNodes} nodes`);
  const rnd = new Random(options.seed);
  const meanGap = options.meanGapMs ?? ttlMs * 0.8;
  // At most a minority of nodes may be paused or down at once: the lock is only promised to work
  // with a majority up, and a nemesis that takes the majority shows nothing but unavailability.
  // (The one exception is the instant of a wipe round's wipe.)
  const minority = Math.floor((redisNodes - 1) / 2);
  const nodeBusyUntil: number[] = Array.from({ length: redisNodes }, () => 0);
  /** The later faults of a wipe round, in time order: yielded once the schedule has reached their time. */
  const later: RoundFault[] = [];
  let id = 0;
  // The first fault waits one TTL, so every configuration starts from a healthy cluster.
  let at = ttlMs;
  for (;;) {
    at += Math.round(rnd.between(0.4, 1.6) * meanGap);
    for (let next = later[0]; next !== undefined && next.at <= at; next = later[0]) {
      later.shift();
      yield { ...next, id: id++ };
    }
    let kind = rnd.weighted(WEIGHTS);
    const freeNodes = nodeBusyUntil.flatMap((until, node) => (until <= at ? [node] : []));
    if ((kind === "pause-redis" || kind === "kill-redis") && (redisNodes - freeNodes.length >= minority || freeNodes.length === 0)) {
      kind = "pause-in-rmw";
    }
    // A round needs every node: a node already down would take the majority away for the whole round.
    if (kind === "wipe-redis" && freeNodes.length < redisNodes) kind = "pause-in-rmw";
    const base = { id, at };
    switch (kind) {
      case "pause-worker":
      case "pause-in-rmw":
        // Longer than the TTL by a margin: the lease must really expire while the worker sleeps.
        yield { ...base, kind, worker: rnd.int(0, workers - 1), durationMs: Math.round(rnd.between(1.5, 3) * ttlMs) };
        break;
      case "pause-redis":
      case "kill-redis": {
        const node = rnd.pick(freeNodes);
        const durationMs = Math.round(rnd.between(0.3, 2) * ttlMs);
        nodeBusyUntil[node] = at + durationMs + (kind === "kill-redis" ? RESTART_MARGIN_MS : 0);
        yield { ...base, kind, node, durationMs };
        break;
      }
      case "wipe-redis": {
        const round = wipeRound(rnd, at, ttlMs, redisNodes);
        nodeBusyUntil.fill(round.until);
        for (const fault of round.faults) {
          if (fault.at <= at) yield { ...fault, id: id++ };
          else later.push(fault);
        }
        continue;
      }
      case "clock-jump":
        yield { ...base, kind, node: clockNode, jumpMs: Math.round(rnd.between(1, 3) * ttlMs), durationMs: 0 };
        break;
      case "delay": {
        const link: Link = rnd.next() < 0.6 ? "store" : rnd.int(0, redisNodes - 1);
        const directions = rnd.pick<Directions>(["up", "down", "both"]);
        yield {
          ...base,
          kind,
          worker: rnd.int(0, workers - 1),
          link,
          directions,
          // Beyond the TTL: a request sent under a valid lease arrives after it expired.
          delayMs: Math.round(rnd.between(1, 2.5) * ttlMs),
          durationMs: Math.round(rnd.between(1, 3) * ttlMs),
        };
        break;
      }
    }
    id++;
  }
}

/** The faults of a schedule that start before `horizonMs`. */
export function planFaults(options: ScheduleOptions, horizonMs: number): Fault[] {
  const faults: Fault[] = [];
  for (const fault of faultSchedule(options)) {
    if (fault.at >= horizonMs) break;
    faults.push(fault);
  }
  return faults;
}

/**
 * A human-readable target, as recorded in the history and shown in the plot. `linkName` names what
 * a delay really holds back when that is not the link the schedule drew (through a gateway).
 */
export function describeTarget(fault: Fault, nodeNames: readonly string[], linkName?: (link: Link) => string): string {
  const node = (n: number): string => `redis ${nodeNames[n] ?? String(n)}`;
  switch (fault.kind) {
    case "pause-worker":
    case "pause-in-rmw":
      return `worker ${fault.worker}`;
    case "pause-redis":
    case "kill-redis":
    case "wipe-redis":
      return node(fault.node);
    case "clock-jump":
      return `${node(fault.node)} +${fault.jumpMs} ms`;
    case "delay":
      return `worker ${fault.worker} → ${linkName?.(fault.link) ?? (fault.link === "store" ? "store" : node(fault.link))} (${fault.directions}, ${fault.delayMs} ms)`;
    case "reset":
      return `worker ${fault.worker} → ${linkName?.(fault.link) ?? (fault.link === "store" ? "store" : node(fault.link))}`;
    case "pause-gateway":
      return "gateway";
    case "pause-postgres":
    case "kill-postgres":
      return "postgres";
    case "pause-s3":
    case "kill-s3":
      return "radosgw";
    case "pause-dynamodb":
    case "kill-dynamodb":
      return "dynalite";
    case "pause-azure-blob":
      return "azurite";
    case "skew-s3":
      return `radosgw clock ${fault.skewMs > 0 ? "+" : ""}${(fault.skewMs / 60_000).toFixed(1)} min`;
  }
}
