export { InvalidArgumentError } from "./errors.js";
export {
  assertHolder,
  assertResource,
  assertToken,
  CONTROL_CHARACTER,
  HOLDER_PATTERN,
  LONE_SURROGATE,
  MAX_HOLDER_LENGTH,
  MAX_RESOURCE_LENGTH,
  MAX_TOKEN,
  parseToken,
  resourceProblem,
  TOKEN_PATTERN,
} from "./rules.js";
export { admits, checkFence, type CheckedFence, type Fence } from "./fence.js";
export {
  assertCredentialKey,
  CREDENTIAL_VERSION,
  CredentialError,
  credentialKeys,
  KEY_ID_PATTERN,
  MIN_SECRET_BYTES,
  mintFenceCredential,
  verifyFenceCredential,
  type CredentialKey,
  type CredentialProblem,
  type VerifiedCredential,
} from "./credential.js";
