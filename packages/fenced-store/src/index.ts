export { ContentionError, ResourceMismatchError, StaleTokenError, VersionMismatchError } from "./errors.js";
export { InvalidArgumentError } from "@fenced/fence";
export { type Fence, assertFence, assertKey, assertResource, MAX_TOKEN } from "./fence.js";
export { assertContentType } from "./s3-body.js";
export { FencedPostgres, type FencedPostgresOptions, type PgWriteOptions, type PgPutResult, type PgRecord } from "./postgres.js";
export { type JsonValue, assertJsonValue } from "./json.js";
export { FencedS3, type FencedS3Options, type S3Body, type S3Bytes, type S3DeleteOptions, type S3Object, type S3PutResult, type S3UpdateOptions, type S3VerifyResult, type S3WriteOptions } from "./s3.js";
