export { SCENARIO_LIST, type Scenario, type RunRecord, type ScenarioEnv } from "./scenarios/index.js";
export { gcPause, GC_PAUSE_MODES, type GcPauseMode } from "./scenarios/gc-pause.js";
export { clockJump, CLOCK_JUMP_MODES, type ClockJumpMode } from "./scenarios/clock-jump.js";
export { bothPaused, BOTH_PAUSED_MODES, type BothPausedMode } from "./scenarios/both-paused.js";
export {
  openStore,
  prepareBackend,
  type BackendConfig,
  type BackendName,
  type DemoStore,
  type FileDoc,
  type Refusal,
  type WriteOutcome,
} from "./backends.js";
export { judge, type Verdict, type Expectation } from "./judge.js";
export { renderSvg } from "./svg.js";
export { renderHtml } from "./html.js";
export { startDemoServers, type DemoServers } from "./servers.js";
export type { DemoEvent, Lane, Span, ScenarioName } from "./timeline.js";
