// "@fenced/fence/internal": the parts of the rules that @fenced/lock, @fenced/store and
// @fenced/gateway compose into their own checks and schemas — the patterns, the *Problem functions
// that say why a value is refused without throwing, the checks of several fences or resources, the
// outcome an error is observed as. Not public: not covered by semver, it changes with the packages
// that import it (each depends on the same version of this one). Users import "@fenced/fence".
export { ERROR_CODE_LIST, outcomeOf, type Outcome } from "./fenced-error.js";
export {
  checkResources,
  CONTROL_CHARACTER,
  HOLDER_PATTERN,
  keyProblem,
  LONE_SURROGATE,
  resourceProblem,
  resourcesProblem,
  TOKEN_PATTERN,
} from "./rules.js";
export { checkFences, refuseEndedLease, type CheckedFence } from "./fence.js";
// The sealing the gateway's lease ids share with the fence credentials.
export { KEY_ID_PATTERN, MAX_SEALED_LENGTH, MIN_SECRET_BYTES, parseEpochMs, seal, unseal, type SealKind } from "./sealed.js";
export { CREDENTIAL_VERSION } from "./credential.js";
