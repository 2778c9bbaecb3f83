import type { LoopState } from "./fair-share.js";

/**
 * Whether the gateway is given more than its limits let run: requests waited for a slot at every
 * observation of the last interval — a standing queue, as CoDel reads one, so that a burst the
 * limits take in at once does not count. A loop that runs late while nothing waits for a slot is
 * doing all it is given (a closed loop of clients, each sending its next request when the last is
 * answered, is never more than the gateway carries, and fewer clients than half a family's limit
 * never queue: a limit learns only from windows with half of it in flight, so they cannot lower
 * it): refusing then only costs CPU, and each refused client is back at once. Pure: the caller
 * passes the time and the counts.
 *
 * The backlog's minimum rising over three intervals was read as growth too, and it misjudged a
 * closed loop: under a CPU quota a turn of the loop spans several intervals, and 64 clients at a
 * quarter of a core read as growing in 19 of 154 rounds of quota.test.ts (their minimum 32, 34, 36,
 * 40, nothing queued); with one late tick that made the loop read as behind and 52 writes refused. In
 * a 4× flood it added little: the rise alone, with no standing queue, at 0.3–0.5 % of the requests
 * judged (two runs of `pnpm bench overload`'s two keys). Without it a mild overload under a limit far
 * above what the gateway serves (the default 512) is seen only once the slots are full and a queue
 * stands: seconds later at 1.1×, while each request waits at most about the limit ÷ the rate served,
 * plus admission.queueTimeoutMs.
 *
 * It only bounds how much work is let in: no fence, token or write depends on it.
 */

/** The queue must stand for this long (CoDel's interval). */
const INTERVAL_MS = 100;

export class Backlog {
  #start = Number.NEGATIVE_INFINITY;
  #queueing = false;
  #empty = true;
  /** Whether some request waited for a slot at every observation of this interval. */
  #queuedThrough = false;

  /** True while requests kept waiting for a slot through the last interval (a standing queue). */
  get queueing(): boolean {
    return this.#queueing;
  }

  /**
   * Whether nothing admitted was unanswered at the last observation (taken as a request is judged,
   * before it is counted). It counts only what admission judged, in every family: refusals, requests
   * it never judges (lease extensions and releases, health, metrics, unauthenticated ones) and work
   * outside requests are not in it; one long request (an object's stream, an acquisition's wait)
   * keeps it from being empty.
   */
  get empty(): boolean {
    return this.#empty;
  }

  /** The backlog at `now`: `admitted` requests not yet answered, `queued` of them waiting for a slot. */
  observe(now: number, admitted: number, queued: number): void {
    this.#empty = admitted === 0;
    if (now - this.#start >= INTERVAL_MS) {
      // Over a gap of several intervals nothing was observed: what came before says nothing of now.
      this.#queueing = this.#queuedThrough && now - this.#start < 2 * INTERVAL_MS;
      this.#start = now;
      this.#queuedThrough = true;
    }
    // Emptied, it stands no more: not until a queue stands through an interval again.
    if (admitted === 0) this.#queueing = false;
    this.#queuedThrough &&= queued > 0;
  }
}

/**
 * The loop as the fair share reads it. Idle while on time (its standing lateness at most
 * `targetMs`) with nothing admitted unanswered: it has time for what it is sent, and no share holds
 * anyone back (late, the loop may be behind on work the backlog does not count). Behind only while
 * late at every tick of the last 100 ms (its standing lateness, less any time its thread waited for
 * a CPU, above `targetMs`), working (at least `ownWork` of its time on a CPU: late while it works
 * less, it is short of a CPU another process has) and with a standing queue: then it is given more
 * than it finishes, and only taking fewer helps. Keeping up otherwise, so that a share that binds
 * grows back as soon as the queue is gone.
 */
export function loopState(
  loop: { readonly standingMs: number; readonly utilization: number },
  backlog: Pick<Backlog, "queueing" | "empty">,
  targetMs: number,
  ownWork: number,
): LoopState {
  if (backlog.empty && loop.standingMs <= targetMs) return "idle";
  return loop.standingMs > targetMs && loop.utilization >= ownWork && backlog.queueing ? "behind" : "keeping-up";
}
