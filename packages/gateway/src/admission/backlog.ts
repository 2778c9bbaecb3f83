import type { LoopState } from "./fair-share.js";

/**
 * Whether the gateway's backlog of admitted work grows: the requests admitted and not yet answered
 * (in flight or waiting for a slot), their minimum over each interval against the one before — the
 * minimum, as CoDel reads a queue, so that a burst that is served at once does not count. A loop
 * that runs late while its backlog stays flat is doing all it is given and keeping up with it (a
 * closed loop of clients, each sending its next request when the last is answered, can never be
 * more than the gateway carries); refusing then only costs CPU, and each refused client is back at
 * once. Pure: the caller passes the time and the count.
 *
 * It only bounds how much work is let in: no fence, token or write depends on it.
 */

/** The minimum is taken over this long (CoDel's interval). */
const INTERVAL_MS = 100;
/** The minimum must rise in this many intervals in a row: a closed loop's backlog refills after a dip within one. */
const RISES = 3;
/** And by this share and four requests more over them in all: less is noise. */
const GROWTH = 0.1;

export class Backlog {
  #start = Number.NEGATIVE_INFINITY;
  #min = Infinity;
  /** The minima of the last RISES + 1 intervals, the latest last. */
  #minima: number[] = [];
  #growing = false;
  #empty = true;
  /** Whether some request waited for a slot at every observation of this interval. */
  #queuedThrough = false;

  /**
   * True while the minimum rose in each of the last RISES intervals, by GROWTH and four requests in
   * all — the gateway takes in more than it answers, whatever the bursts — or requests kept waiting
   * for a slot through the last interval (a standing queue).
   */
  get growing(): boolean {
    return this.#growing;
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
      if (now - this.#start >= 2 * INTERVAL_MS) this.#minima = [];
      else this.#minima = [...this.#minima, this.#min].slice(-(RISES + 1));
      this.#growing = this.#queuedThrough && this.#minima.length > 0;
      this.#growing ||= this.#rising();
      this.#start = now;
      this.#min = Infinity;
      this.#queuedThrough = true;
    }
    // Emptied, it grows no more: not until its minima rise again from the 0 this interval now holds.
    if (admitted === 0) this.#growing = false;
    this.#min = Math.min(this.#min, admitted);
    this.#queuedThrough &&= queued > 0;
  }

  #rising(): boolean {
    const m = this.#minima;
    // An interval whose minimum was 0 saw the gateway answer all it had been given: a rise from there
    // is a load arriving (clients connecting, a stall's backlog refilling), not one it fails to clear
    // — CoDel, too, leaves its dropping state once the queue empties.
    if (m.length < RISES + 1 || m[0] === 0) return false;
    for (let i = 1; i < m.length; i++) if ((m[i] as number) <= (m[i - 1] as number)) return false;
    return (m.at(-1) as number) > (m[0] as number) * (1 + GROWTH) + 4;
  }
}

/**
 * The loop as the fair share reads it. Idle while on time (its standing lateness at most
 * `targetMs`) with nothing admitted unanswered: it has time for what it is sent, and no share holds
 * anyone back (late, the loop may be behind on work the backlog does not count). Behind only while
 * late at every tick of the last 100 ms (its standing lateness, less any time its thread waited for
 * a CPU, above `targetMs`), working (at least `ownWork` of its time on a CPU: late while it works
 * less, it is short of a CPU another process has) and with a growing backlog: then it takes in more
 * than it finishes, and only taking fewer helps. Keeping up otherwise, so that a share that binds
 * grows back as soon as the backlog stops growing.
 */
export function loopState(
  loop: { readonly standingMs: number; readonly utilization: number },
  backlog: Pick<Backlog, "growing" | "empty">,
  targetMs: number,
  ownWork: number,
): LoopState {
  if (backlog.empty && loop.standingMs <= targetMs) return "idle";
  return loop.standingMs > targetMs && loop.utilization >= ownWork && backlog.growing ? "behind" : "keeping-up";
}
