export { InvalidArgumentError } from "./errors.js";
export {
  ERROR_CODE_LIST,
  ERROR_CODES,
  FencedError,
  outcomeOf,
  type Applied,
  type ErrorCode,
  type ErrorCodeDefinition,
  type FencedErrorOptions,
  type Outcome,
} from "./fenced-error.js";
export {
  assertHolder,
  assertKey,
  assertResource,
  assertToken,
  CONTROL_CHARACTER,
  HOLDER_PATTERN,
  keyProblem,
  LONE_SURROGATE,
  MAX_HOLDER_LENGTH,
  MAX_KEY_LENGTH,
  MAX_RESOURCE_LENGTH,
  MAX_RESOURCES,
  checkResources,
  resourcesProblem,
  MAX_TOKEN,
  parseToken,
  resourceProblem,
  TOKEN_PATTERN,
} from "./rules.js";
export { admits, checkFence, checkFences, refuseEndedLease, type CheckedFence, type Fence } from "./fence.js";
