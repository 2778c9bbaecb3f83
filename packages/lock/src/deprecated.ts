// Names "@fenced/lock" exported in 0.1.0 that now live in one place only (@fenced/fence), or that a
// user names through the API itself; each goes in 0.3.0.
import { InvalidArgumentError as FenceInvalidArgumentError } from "@fenced/fence";
import type * as client from "./client.js";
import * as errors from "./errors.js";
import type * as keys from "./keys.js";
import type * as lease from "./lease.js";
import type * as observe from "./observe.js";
import * as options from "./options.js";
import type * as redlock from "./redlock.js";

/** @deprecated Import `InvalidArgumentError` from `@fenced/fence` (the same class); removed from `@fenced/lock` in 0.3.0. */
export const InvalidArgumentError = FenceInvalidArgumentError;
/** @deprecated Import `InvalidArgumentError` from `@fenced/fence` (the same class); removed from `@fenced/lock` in 0.3.0. */
export type InvalidArgumentError = FenceInvalidArgumentError;
/** @deprecated `Parameters<Redlock["acquire"]>[2]` names it; removed from `@fenced/lock` in 0.3.0. */
export type AcquireOptions = options.AcquireOptions;
/** @deprecated a `HeldLease` of one resource; removed from `@fenced/lock` in 0.3.0. */
export type HeldOne = options.HeldOne;
/** @deprecated a `HeldLease` of several resources; removed from `@fenced/lock` in 0.3.0. */
export type HeldSet = options.HeldSet;
/** @deprecated `LeaseLostError["fences"][number]` names it; removed from `@fenced/lock` in 0.3.0. */
export type HeldFence = errors.HeldFence;
/** @deprecated `Lease["fences"][number]` names it; removed from `@fenced/lock` in 0.3.0. */
export type LeaseFence = lease.LeaseFence;
/** @deprecated `LeaseLostError["kind"]` names it; removed from `@fenced/lock` in 0.3.0. */
export type LeaseLostKind = errors.LeaseLostKind;
/** @deprecated `LockNotAcquiredError["nodes"][number]["reason"]` names it; removed from `@fenced/lock` in 0.3.0. */
export type NodeFailureReason = errors.NodeFailureReason;
/** @deprecated `LockNotAcquiredError["nodes"][number]` names it; removed from `@fenced/lock` in 0.3.0. */
export type NodeFailure = errors.NodeFailure;
/** @deprecated `LockOperationMessage["operation"]` names it; removed from `@fenced/lock` in 0.3.0. */
export type LockOperation = observe.LockOperation;
/** @deprecated `LockOperationMessage["outcome"]` names it; removed from `@fenced/lock` in 0.3.0. */
export type LockOutcome = observe.LockOutcome;
/** @deprecated `ConstructorParameters<typeof Redlock>[0][number]` names it (an ioredis client, or a Cluster); removed from `@fenced/lock` in 0.3.0. */
export type RedisClient = client.RedisClient;
/** @deprecated `ReturnType<typeof resourceKeys>` names it; removed from `@fenced/lock` in 0.3.0. */
export type ResourceKeys = keys.ResourceKeys;
/** @deprecated `Parameters<Redlock["acquire"]>[0]` names it (a resource, or an array of them); removed from `@fenced/lock` in 0.3.0. */
export type Resources = redlock.Resources;
/** @deprecated The README's tables list the kinds; removed from `@fenced/lock` in 0.3.0. */
export const LEASE_LOST_KINDS: typeof errors.LEASE_LOST_KINDS = errors.LEASE_LOST_KINDS;
/** @deprecated The README's tables list the reasons; removed from `@fenced/lock` in 0.3.0. */
export const NODE_FAILURE_REASONS: typeof errors.NODE_FAILURE_REASONS = errors.NODE_FAILURE_REASONS;
/** @deprecated `new Redlock` refuses a shorter TTL (100 ms) with InvalidArgumentError; removed from `@fenced/lock` in 0.3.0. */
export const MIN_TTL_MS: typeof options.MIN_TTL_MS = options.MIN_TTL_MS;
