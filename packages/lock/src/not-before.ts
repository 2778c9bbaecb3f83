import { performance } from "node:perf_hooks";

/** Node's longest timer, in ms (about 24.8 days): a longer one fires after 1 ms, with a TimeoutOverflowWarning. */
const LONGEST_TIMER_MS = 2 ** 31 - 1;

/**
 * Calls `fn` once `ms` have passed since `since` (both by performance.now()), never sooner, and only
 * after the I/O that was ready then has been read. A Node timer reads its start and its expiry from
 * the event loop's millisecond clock (truncated, and the expiry's read once per run of the timers),
 * so `setTimeout(fn, ms)` can run `fn` before `ms` have passed by performance.now() (measured here: 1
 * to 3 timers in 100, up to 1.3 ms early). And a loop that stalled (a long collection, a host that
 * took the CPU) runs its timers before it reads the answers that arrived during the stall: `fn` goes
 * through setImmediate (the check phase, after the poll phase that reads them).
 * Invariant it keeps: a node reported `timeout` was silent for its whole nodeTimeoutMs, and still
 * unread once the loop had read its sockets after it; a round that gives up on its nodes gave them
 * all of it. `unref`: the wait does not keep the process alive. Returns the function that cancels
 * it. An `ms` past Node's longest timer (about 24.8 days; Infinity included) waits in steps of that
 * length, never in Node's 1 ms fallback.
 */
export function notBefore(since: number, ms: number, fn: () => void, options: { unref?: boolean } = {}): () => void {
  let timer: NodeJS.Timeout;
  let immediate: NodeJS.Immediate | undefined;
  // Never unref'd: an unref'd immediate lets the poll phase block, so `fn` would wait for some other
  // timer or socket to wake the loop. Ref'd, it keeps the loop for one more turn only.
  const due = (): void => {
    immediate = setImmediate(fn);
  };
  const arm = (): void => {
    timer = setTimeout(
      () => (performance.now() - since < ms ? arm() : due()),
      Math.min(LONGEST_TIMER_MS, Math.max(0, Math.ceil(since + ms - performance.now()))),
    );
    if (options.unref === true) timer.unref();
  };
  arm();
  return () => {
    clearTimeout(timer);
    clearImmediate(immediate);
  };
}
