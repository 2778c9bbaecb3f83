// "@fenced/store/internal": what @fenced/gateway composes from the store into its own schemas, limits
// and error mapping — the option bounds, the version formats, the JSON check, the content type's
// check, putAll's bound, PostgreSQL's SQLSTATE reader, the sweep's report types — and the pool types
// the benchmarks drive. Not public: not covered by semver, it changes with the packages that import
// it. It loads neither pg nor any store's SDK (the store parts here are constants, types, or read
// errors by shape), so that the gateway loads an SDK only for a store it serves.
export { DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS, MIN_TIMEOUT_MS } from "./options.js";
export { OBJECT_VERSION, RECORD_VERSION } from "./versions.js";
export { assertJsonValue } from "./json.js";
export { assertContentType } from "./objects/body.js";
export { MAX_PUT_ALL } from "./postgres/options.js";
export type { FenceSet } from "./fence.js";
export { sqlState } from "./postgres/failures.js";
export type { PgClient, PgQueryConfig, PgQueryResult } from "./postgres/types.js";
export type { S3SweepProgress, S3SweepReport } from "./s3/sweep-report.js";
