/** Why admission control refused a request: the `reason` of its 503 `overloaded` answer and of its metric. */
export const SHED_REASONS = ["queue-full", "queue-timeout", "evicted", "event-loop-delay"] as const;
export type ShedReason = (typeof SHED_REASONS)[number];
