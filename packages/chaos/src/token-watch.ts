import type { HistoryEvent } from "./history.js";

/**
 * What the lock's acquisitions show of the wipe rounds, event by event: the checker counts it over a
 * whole history, and a run watches it as the history grows (RunEnd, run-end.ts, ends no run before a
 * round has shown, within a bound).
 *
 * - repeated: an acquisition of a (resource, token) another holder had already acquired. An
 *   undisclosed holder is still a lease of its own: every acquisition draws a fresh random value.
 * - regressions: an acquisition whose token is below one acquired earlier on the same resource (the
 *   lock went backwards).
 */
export class TokenWatch {
  #repeated = 0;
  #regressions = 0;
  readonly #holders = new Map<string, Set<string>>(); // "resource@token" → holders
  readonly #highest = new Map<string, bigint>(); // resource → highest token acquired

  add(e: HistoryEvent): void {
    if (e.type !== "acquired") return;
    const slot = `${e.resource}@${e.token}`;
    const holders = this.#holders.get(slot) ?? new Set<string>();
    const holder = e.holder ?? `undisclosed:${e.op}`;
    if (holders.size > 0 && !holders.has(holder)) this.#repeated++;
    this.#holders.set(slot, holders.add(holder));
    const token = BigInt(e.token);
    const before = this.#highest.get(e.resource);
    if (before !== undefined && token < before) this.#regressions++;
    if (before === undefined || token > before) this.#highest.set(e.resource, token);
  }

  /** Acquisitions of a token another holder of the resource had acquired. */
  get repeated(): number {
    return this.#repeated;
  }

  /** Acquisitions of a token below one acquired earlier on the resource. */
  get regressions(): number {
    return this.#regressions;
  }

  static of(history: readonly HistoryEvent[]): TokenWatch {
    const watch = new TokenWatch();
    for (const e of history) watch.add(e);
    return watch;
  }
}

/**
 * Whether a run's wipe rounds showed: the lock handed out a token again, or, with pairs, went below
 * one it had handed out (pairs contend harder: an attempt that loses still advances the counters
 * where it was granted, so the tokens handed out are sparse, and the ones a round hands out again
 * rarely hit one exactly). suite.ts fails a run where they did not; RunEnd waits for it.
 */
export function wipeShown(tokens: { readonly repeated: number; readonly regressions: number }, pairs: boolean): boolean {
  return tokens.repeated > 0 || (pairs && tokens.regressions > 0);
}
