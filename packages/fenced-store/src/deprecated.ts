// Names "@fenced/store" exported in 0.1.0 that now live in one place only (@fenced/fence), or that a
// user names through the API itself; each goes in 0.3.0.
import * as fence from "@fenced/fence";
import * as errors from "./errors.js";
import * as fenceSet from "./fence.js";
import * as json from "./json.js";
import type * as observe from "./observe.js";
import * as versions from "./versions.js";

/** @deprecated Import `InvalidArgumentError` from `@fenced/fence` (the same class); removed from `@fenced/store` in 0.3.0. */
export const InvalidArgumentError = fence.InvalidArgumentError;
/** @deprecated Import `InvalidArgumentError` from `@fenced/fence` (the same class); removed from `@fenced/store` in 0.3.0. */
export type InvalidArgumentError = fence.InvalidArgumentError;
/** @deprecated Import `Fence` from `@fenced/fence` (the same type); removed from `@fenced/store` in 0.3.0. */
export type Fence = fence.Fence;
/** @deprecated Import `assertKey` from `@fenced/fence` (the same function); removed from `@fenced/store` in 0.3.0. */
export const assertKey: typeof fence.assertKey = fence.assertKey;
/** @deprecated Import `assertResource` from `@fenced/fence` (the same function); removed from `@fenced/store` in 0.3.0. */
export const assertResource: typeof fence.assertResource = fence.assertResource;
/** @deprecated Import `MAX_TOKEN` from `@fenced/fence` (the same value); removed from `@fenced/store` in 0.3.0. */
export const MAX_TOKEN = fence.MAX_TOKEN;
/** @deprecated Pass a fence to a store, which checks it (`checkFence` in `@fenced/fence` checks one); removed from `@fenced/store` in 0.3.0. */
export const assertFence: typeof fenceSet.assertFence = fenceSet.assertFence;
/** @deprecated A store checks every value it writes; removed from `@fenced/store` in 0.3.0. */
export const assertJsonValue: typeof json.assertJsonValue = json.assertJsonValue;
/** @deprecated A version is the string a read or write answered; removed from `@fenced/store` in 0.3.0. */
export const OBJECT_VERSION: RegExp = versions.OBJECT_VERSION;
/** @deprecated A version is the string a read or write answered; removed from `@fenced/store` in 0.3.0. */
export const RECORD_VERSION: RegExp = versions.RECORD_VERSION;
/** @deprecated A Lease or an array of fences; `Parameters<FencedPostgres["transaction"]>[0]` names it; removed from `@fenced/store` in 0.3.0. */
export type FenceSet = fenceSet.FenceSet;
/** @deprecated `StoreSetupError["backend"]` names it; removed from `@fenced/store` in 0.3.0. */
export type StoreBackend = errors.StoreBackend;
/** @deprecated `StoreWriteMessage["outcome"]` names it; removed from `@fenced/store` in 0.3.0. */
export type StoreOutcome = observe.StoreOutcome;
/** @deprecated `StoreUnavailableError["reason"]` names it; removed from `@fenced/store` in 0.3.0. */
export type UnavailableReason = errors.UnavailableReason;
