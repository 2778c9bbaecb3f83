// "@fenced/store/postgres": needs the `pg` peer dependency at run time only as the pool you pass in;
// the types describe the pool by shape, so any pg 8 version (or a wrapper) type-checks.
export { FencedPostgres } from "./postgres.js";
export type {
  FencedPostgresOptions,
  PgClient,
  PgParam,
  PgPool,
  PgPutResult,
  PgQueryConfig,
  PgQueryResult,
  PgRecord,
  PgSignalOptions,
  PgTransferOptions,
  PgWriteOptions,
} from "./postgres-types.js";
