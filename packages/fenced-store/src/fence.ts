import type { Fence } from "@fenced/fence";

/**
 * A fence and a key are defined once, in @fenced/fence; the store knows a fence only structurally.
 * Every store method that takes a key checks it with assertKey before any I/O.
 */
export { type Fence, admits, assertKey, assertResource, checkFence, MAX_TOKEN } from "@fenced/fence";
export { type CheckedFence } from "@fenced/fence/internal";

/**
 * Several fences presented by one call: an array of fences, or an object carrying them as `fences`
 * — a @fenced/lock Lease, of one resource or of several (one fence per resource, in the order
 * asked). Checked by checkFences: none twice for one resource, at most MAX_RESOURCES.
 */
export type FenceSet = readonly Fence[] | { readonly fences: readonly Fence[] };
