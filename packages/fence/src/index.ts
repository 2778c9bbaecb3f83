// "@fenced/fence": what a fence is — a resource, token and holder, the comparison a store makes
// (admits), the limits and checks of each field, and the error contract every fenced package shares
// (FencedError, its codes, InvalidArgumentError). The public API only; the credentials live in
// "@fenced/fence/credentials", and the rules' parts the store and gateway compose (patterns, the
// *Problem functions) in "@fenced/fence/internal", which is not public.
export { InvalidArgumentError } from "./errors.js";
export { ERROR_CODES, FencedError, type Applied, type ErrorCode } from "./fenced-error.js";
export {
  assertHolder,
  assertKey,
  assertResource,
  assertToken,
  MAX_HOLDER_LENGTH,
  MAX_KEY_LENGTH,
  MAX_RESOURCE_LENGTH,
  MAX_RESOURCES,
  MAX_TOKEN,
  parseToken,
} from "./rules.js";
export { admits, checkFence, type Fence } from "./fence.js";
