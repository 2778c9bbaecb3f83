export { Redlock, type Resources } from "./redlock.js";
export { MIN_TTL_MS, type RedlockOptions, type AcquireOptions, type HeldLease, type HeldOne, type HeldSet } from "./options.js";
export { Lease, holderOf, type LeaseFence } from "./lease.js";
export {
  LockNotAcquiredError,
  LeaseLostError,
  TokenSpaceExhaustedError,
  LEASE_LOST_KINDS,
  NODE_FAILURE_REASONS,
  type HeldFence,
  type LeaseLostKind,
  type NodeFailure,
  type NodeFailureReason,
} from "./errors.js";
export { InvalidArgumentError } from "@fenced/fence";
export { resourceKeys, type ResourceKeys } from "./keys.js";
export { type RedisClient } from "./client.js";
