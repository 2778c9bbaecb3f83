// "@fenced/lock/internal": what @fenced/gateway composes from the lock into its configuration,
// health answers and metrics — the TTL bound, a node's failure and probe, a round's per-node result,
// the client by shape. Not public: not covered by semver, it changes with the packages that import it.
export { MIN_TTL_MS, type NodeResult } from "./options.js";
export { type NodeFailure } from "./errors.js";
export { type NodeProbe, type NodesProbe, type NodeState, type ProbeOptions } from "./probe.js";
export { type RedisClient } from "./client.js";
