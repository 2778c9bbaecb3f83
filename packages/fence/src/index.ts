export { InvalidArgumentError } from "./errors.js";
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
  MAX_TOKEN,
  parseToken,
  resourceProblem,
  TOKEN_PATTERN,
} from "./rules.js";
export { admits, checkFence, refuseEndedLease, type CheckedFence, type Fence } from "./fence.js";
export {
  assertCredentialKey,
  credentialKeys,
  KEY_ID_PATTERN,
  MAX_SEALED_LENGTH,
  MIN_SECRET_BYTES,
  parseEpochMs,
  seal,
  SealError,
  unseal,
  type CredentialKey,
  type SealKind,
  type SealProblem,
} from "./sealed.js";
export {
  CREDENTIAL_VERSION,
  CredentialError,
  ExpiredCredentialError,
  mintFenceCredential,
  verifyFenceCredential,
  type CredentialProblem,
  type FenceWithEnd,
  type VerifiedCredential,
} from "./credential.js";
