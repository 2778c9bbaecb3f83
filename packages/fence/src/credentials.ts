// "@fenced/fence/credentials": signed fence credentials (credential.ts) and the sealing they rest on
// (sealed.ts) — what a gateway mints for a lease and verifies on a write, and what a service holding
// the shared secret can mint itself. Apart from the main entry, which is what a fence is. The sealing
// itself (seal, unseal, its formats and limits) is the gateway's, through "@fenced/fence/internal".
export { credentialKeys, SealError, type CredentialKey } from "./sealed.js";
export { CredentialError, ExpiredCredentialError, mintFenceCredential, verifyFenceCredential } from "./credential.js";
