export { Redlock } from "./redlock.js";
export { MIN_TTL_MS, type RedlockOptions, type AcquireOptions, type HeldLease } from "./options.js";
export { Lease, holderOf } from "./lease.js";
export {
  LockNotAcquiredError,
  LeaseLostError,
  TokenSpaceExhaustedError,
  LEASE_LOST_KINDS,
  NODE_FAILURE_REASONS,
  type LeaseLostKind,
  type NodeFailure,
  type NodeFailureReason,
} from "./errors.js";
export { InvalidArgumentError } from "@fenced/fence";
export { resourceKeys, type ResourceKeys } from "./keys.js";
export { redisErrorCode, type RedisClient } from "./client.js";
