// Names this entry exported in 0.1.0 that now live in one place only, @fenced/fence; each goes in 0.3.0.
import * as fence from "@fenced/fence";

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
