// "@fenced/fence/credentials": signed fence credentials (credential.ts) and the sealing they rest on
// (sealed.ts) — what a gateway mints for a lease and verifies on a write, and what a service holding
// the shared secret can mint itself. Apart from the main entry, which is what a fence is.
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
