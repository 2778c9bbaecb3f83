export { StaleTokenError, VersionMismatchError } from "./errors.js";
export { type Fence, assertFence, assertKey, assertResource, MAX_TOKEN } from "./fence.js";
