import type { NodeState } from "@fenced/lock/internal";

/**
 * The words of a readiness answer, one list each: the answer's schema (schemas/answers.ts), the checks
 * (health.ts) and readiness (readiness.ts) all take them from here.
 */

/** readiness: `ok` every backend serves; `degraded` some do not answer, others serve; `unavailable` see readiness.ts; `draining` stopping. */
export const READINESS_STATUSES = ["ok", "degraded", "unavailable", "draining"] as const;
export type ReadinessStatus = (typeof READINESS_STATUSES)[number];

/** A store's check (health.ts says what each means). */
export const CHECK_STATES = ["up", "refused", "timeout", "error", "misconfigured"] as const;
export type CheckState = (typeof CHECK_STATES)[number];

/** What a store answered that means an operator must act. */
export const SETUP_PROBLEMS = [
  "not-migrated",
  "no-such-database",
  "authentication-failed",
  "permission-denied",
  "no-such-bucket",
  "access-denied",
  "no-credentials",
] as const;
export type SetupProblem = (typeof SETUP_PROBLEMS)[number];

/** A lock node's answer to the probe, as the lock names it (@fenced/lock probeNodes). */
export const NODE_STATES = ["up", "pending", "refused", "timeout", "error"] as const satisfies readonly NodeState[];
// Every state the lock can report is listed: a new one fails to compile here.
const everyNodeState: Record<NodeState, true> = { up: true, pending: true, refused: true, timeout: true, error: true };
void everyNodeState;
