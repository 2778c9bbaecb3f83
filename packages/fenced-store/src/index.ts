// "@fenced/store": what every store shares — the contract each implements (contract.ts), the errors,
// the JSON a record holds, what an observer sees. The writers live in subpaths of their own,
// "@fenced/store/postgres" and "@fenced/store/s3", so that a user of one backend installs and loads
// only that backend's client library. A fence and a key are @fenced/fence's.
export {
  ContentionError,
  CorruptStateError,
  OutcomeUnknownError,
  ResourceMismatchError,
  StaleTokenError,
  StoreSetupError,
  StoreUnavailableError,
  VersionMismatchError,
} from "./errors.js";
export type {
  FencedStore,
  ObjectStore,
  ObjectWriteOptions,
  PutAllOptions,
  PutAllWrite,
  RecordStore,
  SignalOptions,
  StoreCapabilities,
  StoredObject,
  StoredRecord,
  StoredVersion,
  TransferOptions,
  WriteOptions,
  WriteResult,
} from "./contract.js";
export { type JsonValue } from "./json.js";
export { STORE_CHANNELS, type StoreWriteMessage } from "./observe.js";
