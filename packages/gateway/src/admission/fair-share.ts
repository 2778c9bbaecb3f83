/**
 * Which requests the gateway takes while its event loop is behind on its own work — its own CPU is
 * what is short, so every request it reads costs, and the only relief is to take fewer: each API
 * key's arrival rate is estimated, and a fair share (requests per second per key) is adapted so that
 * the loop's delay stays near its target — it shrinks while the loop is behind and grows back while
 * it keeps up. A key sending under the share is let in whole; a key sending over it, with
 * probability share ÷ its rate. So a flood is cut down to what the others get, a key that sends
 * little is not touched, and the gateway keeps taking work at about the rate it can do it, rather
 * than refusing everything while it is behind (which keeps it behind: refusing costs too). This is
 * the rule of core-stateless fair queueing (Stoica, Shenker and Zhang, 1998). Pure: the caller
 * passes the time, the loop's state and the draw.
 *
 * It only bounds how much work is let in: no fence, token or write depends on it.
 */

/** Each key's rate is averaged over about this long. */
const RATE_WINDOW_MS = 100;
/** The share is adjusted at most this often. */
const ADJUST_EVERY_MS = 50;
/** While the loop is behind: the share shrinks by this factor per adjustment. */
const DECREASE = 0.8;
/** While the loop keeps up: it grows by this factor, until it no longer binds. */
const INCREASE = 1.1;
/** The share never goes below this: a key is always let in now and then, so its rate stays known. */
const MIN_SHARE = 1;
/** Keys not seen for this long are forgotten. */
const FORGET_MS = 10_000;

/**
 * The event loop as the share reads it (backlog.ts's loopState): behind on its own work — late at
 * every tick, working nearly all the time, requests waiting for a slot throughout — keeping up, or
 * idle: on time, and nothing it admitted unanswered.
 */
export type LoopState = "behind" | "keeping-up" | "idle";

interface KeyRate {
  /** Requests per second, averaged over RATE_WINDOW_MS. */
  rate: number;
  last: number;
}

export class FairShare {
  /** Requests per second per key; Infinity: nobody is held back. */
  #share = Infinity;
  #adjusted = 0;
  #swept = 0;
  readonly #keys = new Map<string, KeyRate>();

  /** The share now, requests per second per key (Infinity: it binds nobody). */
  get share(): number {
    return this.#share;
  }

  /**
   * Counts a request of `key` and says whether it goes on: always while the share does not bind,
   * else with probability `weight` × share ÷ the key's rate (`weight` < 1 makes a kind of request
   * the first to go). `draw` is uniform in [0, 1).
   */
  admit(key: string, weight: number, now: number, draw: number): boolean {
    const rate = this.#count(key, now);
    if (this.#share === Infinity) return true;
    return draw * rate < weight * this.#share;
  }

  /**
   * Adjusts the share to the loop, at most every ADJUST_EVERY_MS: it shrinks while the loop is behind
   * on its own work and grows back while it keeps up. Idle, it binds nobody at once. Grown back step
   * by step from there instead, it held a closed loop of clients cut by a moment of lateness below
   * its own rate for a second and more: its refused connections parked and its served ones behind
   * them (parking.ts), each read again only as a slot freed, and each refused again lost that read,
   * until nothing was in flight and all were read at once, most of them into refusals again — it
   * refused hundreds a second while the loop kept up (the storm of quota.test.ts, docs/benchmarks.md).
   */
  adjust(now: number, loop: LoopState): void {
    if (now - this.#swept > FORGET_MS) this.#sweep(now);
    // On time with nothing admitted unanswered (loopState): a share that binds now holds back work
    // the loop has time for. Not throttled to ADJUST_EVERY_MS: each request read until then would be refused by it.
    if (loop === "idle") {
      this.#share = Infinity;
      return;
    }
    if (now - this.#adjusted < ADJUST_EVERY_MS) return;
    this.#adjusted = now;
    if (loop === "behind") {
      // First time behind: start from the largest rate a key sends now (the share that binds nobody yet).
      if (this.#share === Infinity) this.#share = Math.max(1, ...[...this.#keys.values()].map((k) => k.rate));
      this.#share = Math.max(MIN_SHARE, this.#share * DECREASE);
    } else if (this.#share !== Infinity) {
      this.#share *= INCREASE;
      // No key sends that much: the share binds nobody.
      if (![...this.#keys.values()].some((k) => k.rate > this.#share)) this.#share = Infinity;
    }
  }

  /** The key's rate with this request counted: an average over about RATE_WINDOW_MS, whatever the gaps between requests. */
  #count(key: string, now: number): number {
    const k = this.#keys.get(key);
    if (k === undefined) {
      this.#keys.set(key, { rate: 1000 / RATE_WINDOW_MS, last: now });
      return 1000 / RATE_WINDOW_MS;
    }
    const gap = Math.max(now - k.last, 0.001);
    const kept = Math.exp(-gap / RATE_WINDOW_MS);
    k.rate = (1 - kept) * (1000 / gap) + kept * k.rate;
    k.last = now;
    return k.rate;
  }

  #sweep(now: number): void {
    this.#swept = now;
    for (const [key, k] of this.#keys) if (now - k.last > FORGET_MS) this.#keys.delete(key);
  }
}
