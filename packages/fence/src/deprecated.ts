// Names "@fenced/fence" exported in 0.1.0 that are the packages' internals, not a user's API: each
// stays here, deprecated, until 0.3.0.
import * as fence from "./fence.js";
import * as rules from "./rules.js";

/** @deprecated `ReturnType<typeof checkFence>` names it (the store and gateway import it from `@fenced/fence/internal`, which is not public); removed from `@fenced/fence` in 0.3.0. */
export type CheckedFence = fence.CheckedFence;
/** @deprecated Pass a Lease or an array of fences to the store (the store and gateway import it from `@fenced/fence/internal`, which is not public); removed from `@fenced/fence` in 0.3.0. */
export const checkFences: typeof fence.checkFences = fence.checkFences;
/** @deprecated An internal check (the store and gateway import it from `@fenced/fence/internal`, which is not public); removed from `@fenced/fence` in 0.3.0. */
export const refuseEndedLease: typeof fence.refuseEndedLease = fence.refuseEndedLease;
/** @deprecated An internal check (the store and gateway import it from `@fenced/fence/internal`, which is not public); removed from `@fenced/fence` in 0.3.0. */
export const checkResources: typeof rules.checkResources = rules.checkResources;
/** @deprecated `assertResource` and `assertKey` refuse what it matches (the store and gateway import it from `@fenced/fence/internal`, which is not public); removed from `@fenced/fence` in 0.3.0. */
export const CONTROL_CHARACTER: RegExp = rules.CONTROL_CHARACTER;
/** @deprecated `assertResource` and `assertKey` refuse what it matches (the store and gateway import it from `@fenced/fence/internal`, which is not public); removed from `@fenced/fence` in 0.3.0. */
export const LONE_SURROGATE: RegExp = rules.LONE_SURROGATE;
/** @deprecated `assertHolder` checks a holder (the store and gateway import it from `@fenced/fence/internal`, which is not public); removed from `@fenced/fence` in 0.3.0. */
export const HOLDER_PATTERN: RegExp = rules.HOLDER_PATTERN;
/** @deprecated `parseToken` parses a token (the store and gateway import it from `@fenced/fence/internal`, which is not public); removed from `@fenced/fence` in 0.3.0. */
export const TOKEN_PATTERN: RegExp = rules.TOKEN_PATTERN;
/** @deprecated `assertKey` checks a key (the store and gateway import it from `@fenced/fence/internal`, which is not public); removed from `@fenced/fence` in 0.3.0. */
export const keyProblem: typeof rules.keyProblem = rules.keyProblem;
/** @deprecated `assertResource` checks a resource (the store and gateway import it from `@fenced/fence/internal`, which is not public); removed from `@fenced/fence` in 0.3.0. */
export const resourceProblem: typeof rules.resourceProblem = rules.resourceProblem;
/** @deprecated An internal check (the store and gateway import it from `@fenced/fence/internal`, which is not public); removed from `@fenced/fence` in 0.3.0. */
export const resourcesProblem: typeof rules.resourcesProblem = rules.resourcesProblem;
