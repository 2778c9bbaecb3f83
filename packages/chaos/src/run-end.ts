import type { HistoryEvent } from "./history.js";
import { scheduleCoverageMs, type ScheduleOptions } from "./nemesis.js";
import { TokenWatch, wipeShown } from "./token-watch.js";

/**
 * A wipe round can fail to show: the minority it left behind can catch up before the majority is
 * wiped — the workers' ioredis clients replay to a restarted node the commands they queued while it
 * was down, acquisitions among them (a quick S3 run had one resource of two healed in 1 run of 6). A
 * run whose operations are done goes on through this many rounds, and no further, until one shows.
 */
const WIPE_ROUNDS_AT_MOST = 3;

/**
 * When a run ends: once its operations are done, and its schedule has played what every run is
 * judged on (scheduleCoverageMs: the first wipe round and the first store kill), and a wipe round has
 * shown in the tokens (wipeShown) — or WIPE_ROUNDS_AT_MOST rounds have played out without one showing,
 * and the run is judged as it is.
 */
export class RunEnd {
  readonly #tokens = new TokenWatch();
  readonly #minMs: number;
  readonly #maxMs: number;
  #opsDone = false;

  constructor(
    schedule: ScheduleOptions,
    private readonly pairs: boolean,
    private readonly now: () => number,
    private readonly finish: () => void,
  ) {
    this.#minMs = scheduleCoverageMs(schedule);
    this.#maxMs = scheduleCoverageMs(schedule, WIPE_ROUNDS_AT_MOST);
  }

  /** The latest the run may be held for a wipe round to show: the run's timeout must not come before it. */
  get latestMs(): number {
    return this.#maxMs;
  }

  /**
   * Every event of the history, as it arrives. Arrival order is not quite the checker's (it sorts by
   * timestamp): a regression seen here across two workers' crossing events may not count there; the
   * verdict (suite.ts) is the checker's.
   */
  event(e: HistoryEvent): void {
    this.#tokens.add(e);
    if (e.type === "acquired") this.#finishIfCovered();
  }

  /** The last operation has completed. */
  opsDone(): void {
    this.#opsDone = true;
    this.#finishIfCovered();
    this.#checkAt(this.#minMs);
    this.#checkAt(this.#maxMs);
  }

  /** Checks again once the run's clock has reached `at` (a timer may fire a little before it does). */
  #checkAt(at: number): void {
    const left = at - this.now();
    if (left <= 0) this.#finishIfCovered();
    else setTimeout(() => this.#checkAt(at), left).unref();
  }

  #finishIfCovered(): void {
    if (!this.#opsDone) return;
    const now = this.now();
    if (now >= this.#maxMs || (now >= this.#minMs && wipeShown(this.#tokens, this.pairs))) this.finish();
  }
}
