export { Redlock, type RedlockOptions, type AcquireOptions, type HeldLease } from "./redlock.js";
export { Lease, holderOf } from "./lease.js";
export { LockNotAcquiredError, LeaseLostError, type NodeFailure } from "./errors.js";
export { resourceKeys, type ResourceKeys } from "./keys.js";
export type { RedisClient } from "./quorum.js";
