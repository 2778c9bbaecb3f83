/**
 * The adaptive concurrency limit of one route family, a gradient as Netflix's concurrency-limits
 * computes it (Gradient2): calls are sampled in windows; each window's average time is compared with a
 * long-term average, and the limit shrinks by that ratio when calls take longer than they used to
 * (down to half per window), and grows by its square root (the room it leaves for a queue) while they
 * do not. Pure: the caller passes the time.
 *
 * It only bounds how much work is let in: no fence, token or write depends on it.
 */
export interface LimitSettings {
  /** The limit before any sample. */
  readonly initial: number;
  readonly min: number;
  readonly max: number;
}

/** A window closes after this long and at least WINDOW_SAMPLES samples. */
const WINDOW_MS = 100;
const WINDOW_SAMPLES = 10;
/** How many windows the long-term average spans (about a minute of 100 ms windows). */
const LONG_WINDOWS = 600;
/** Calls may take this many times their long-term average before the limit shrinks. */
const TOLERANCE = 1.5;
/** How much of each window's new estimate the limit takes. */
const SMOOTHING = 0.2;

export class GradientLimit {
  #limit: number;
  #long: number | undefined;
  #window = { start: 0, sum: 0, count: 0, maxInflight: 0 };

  constructor(readonly settings: LimitSettings) {
    this.#limit = clamp(settings.initial, settings.min, settings.max);
  }

  /** Calls let in at once at most. */
  get limit(): number {
    return Math.floor(this.#limit);
  }

  /** A call ended after `ms`, with `inflight` calls in flight when it began (itself included). */
  sample(now: number, ms: number, inflight: number): void {
    const w = this.#window;
    if (w.count === 0) w.start = now;
    w.sum += ms;
    w.count++;
    w.maxInflight = Math.max(w.maxInflight, inflight);
    if (w.count < WINDOW_SAMPLES || now - w.start < WINDOW_MS) return;
    this.#update(w.sum / w.count, w.maxInflight);
    this.#window = { start: 0, sum: 0, count: 0, maxInflight: 0 };
  }

  #update(short: number, inflight: number): void {
    const long = this.#long === undefined ? short : this.#long + (short - this.#long) / LONG_WINDOWS;
    // A lasting drop (calls now much faster than they used to): the long average follows it sooner.
    this.#long = long / short > 2 ? long * 0.95 : long;
    // Fewer than half the limit in flight: the window says nothing about how much the backend can take.
    if (inflight < this.#limit / 2) return;
    const gradient = clamp((TOLERANCE * this.#long) / short, 0.5, 1);
    const estimate = this.#limit * gradient + Math.sqrt(this.#limit);
    this.#limit = clamp(this.#limit * (1 - SMOOTHING) + estimate * SMOOTHING, this.settings.min, this.settings.max);
  }
}

function clamp(value: number, min: number, max: number): number {
  return Math.min(max, Math.max(min, value));
}
