import type { ScenarioName } from "../timeline.js";
import { BOTH_PAUSED_MODES, bothPaused } from "./both-paused.js";
import { CLOCK_JUMP_MODES, clockJump } from "./clock-jump.js";
import type { RunRecord, ScenarioEnv } from "./context.js";
import { GC_PAUSE_MODES, gcPause } from "./gc-pause.js";

export type { RunRecord, ScenarioEnv } from "./context.js";

export interface Scenario {
  readonly name: ScenarioName;
  /** For the narration and the HTML page. */
  readonly summary: string;
  readonly modes: readonly string[];
  /** Needs lock nodes the demo controls: node C under the clock shim. */
  readonly needsClock: boolean;
  run(env: ScenarioEnv, mode: string): Promise<RunRecord>;
}

function mode<T extends string>(modes: readonly T[], name: string): T {
  const found = modes.find((m) => m === name);
  if (found === undefined) throw new Error(`unknown mode ${JSON.stringify(name)}; one of ${modes.join(", ")}`);
  return found;
}

export const SCENARIO_LIST: readonly Scenario[] = [
  {
    name: "gc-pause",
    summary:
      "The article's first figure. Client 1 takes the lease (token 33) and reads the file, then its process is stopped (SIGSTOP, like a stop-the-world GC pause) until its lease has expired on the lock nodes. Client 2 acquires (token 34), reads, writes. Client 1 wakes up and writes what it computed before the pause.",
    modes: GC_PAUSE_MODES,
    needsClock: false,
    run: (env, m) => gcPause(env, mode(GC_PAUSE_MODES, m)),
  },
  {
    name: "clock-jump",
    summary:
      "The article's Redlock example, on five redis-server processes. Client 1 holds A, B, C; node C's wall clock jumps forward and C drops the key early; client 2 gets C, D, E. Both believe they hold the lock, and both write.",
    modes: CLOCK_JUMP_MODES,
    needsClock: true,
    run: (env, m) => clockJump(env, mode(CLOCK_JUMP_MODES, m)),
  },
  {
    name: "both-paused",
    summary:
      "From the article's comment thread: two stale holders, both paused past their leases, write in increasing token order. The ratchet alone accepts both, and the first update is lost; registering the token on acquire, or a version precondition on each write, stops it.",
    modes: BOTH_PAUSED_MODES,
    needsClock: false,
    run: (env, m) => bothPaused(env, mode(BOTH_PAUSED_MODES, m)),
  },
];
