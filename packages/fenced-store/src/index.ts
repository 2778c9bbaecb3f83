export { StaleTokenError, VersionMismatchError } from "./errors.js";
export { type Fence, assertFence, assertKey, assertResource, MAX_TOKEN } from "./fence.js";
export { FencedPostgres, type FencedPostgresOptions, type PgWriteOptions, type PgPutResult, type PgRecord } from "./postgres.js";
export { type JsonValue, assertJsonValue } from "./json.js";
