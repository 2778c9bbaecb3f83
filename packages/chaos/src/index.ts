export {
  check,
  DEFAULT_LIVENESS,
  describeEvent,
  VIOLATION_KINDS,
  type CheckResult,
  type Violation,
  type ViolationKind,
} from "./checker.js";
export { type LivenessOptions, type LivenessResult, type SlowCall } from "./liveness.js";
export { DelayProxy, type Direction, type Directions } from "./delay-proxy.js";
export { faultSchedule, planFaults, type Fault, type ScheduleOptions } from "./nemesis.js";
export { plotHistory } from "./plot.js";
export { runChaos, verdict, type ChaosOptions, type ChaosSummary, type RunSummary } from "./suite.js";
export type { HistoryEvent, Mode, Backend, Via, Outcome } from "./history.js";
