// "@fenced/store": what both backends share — the errors, the fence and key rules. The writers live
// in subpaths of their own, "@fenced/store/postgres" and "@fenced/store/s3", so that a user of one
// backend installs and loads only that backend's client library.
export {
  ContentionError,
  CorruptStateError,
  OutcomeUnknownError,
  ResourceMismatchError,
  StaleTokenError,
  StoreSetupError,
  StoreUnavailableError,
  VersionMismatchError,
  type StoreBackend,
  type UnavailableReason,
} from "./errors.js";
export { type FenceSet, assertFence } from "./fence.js";
export { InvalidArgumentError, type Fence, assertKey, assertResource, MAX_TOKEN } from "./deprecated.js";
export { type JsonValue, assertJsonValue } from "./json.js";
export { OBJECT_VERSION, RECORD_VERSION } from "./versions.js";
export { STORE_CHANNELS, type StoreOutcome, type StoreWriteMessage } from "./observe.js";
/** The bounds and default of both stores' `timeoutMs` (whole milliseconds). */
export { DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS, MIN_TIMEOUT_MS } from "./options.js";
