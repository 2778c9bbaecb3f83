import type { NodeState } from "@fenced/lock/internal";

/**
 * The words of a readiness answer, one list each: the answer's schema (../schemas/answers.ts) and
 * readiness (../ops/readiness.ts) take them from here; a store's check's are ../stores/check.ts'.
 */

/** readiness: `ok` every backend serves; `degraded` some do not answer, others serve; `unavailable` see readiness.ts; `draining` stopping. */
export const READINESS_STATUSES = ["ok", "degraded", "unavailable", "draining"] as const;
export type ReadinessStatus = (typeof READINESS_STATUSES)[number];

/** A lock node's answer to the probe, as the lock names it (@fenced/lock probeNodes). */
export const NODE_STATES = ["up", "pending", "refused", "timeout", "error"] as const satisfies readonly NodeState[];
// Every state the lock can report is listed: a new one fails to compile here.
const everyNodeState: Record<NodeState, true> = { up: true, pending: true, refused: true, timeout: true, error: true };
void everyNodeState;
