// "@fenced/store/postgres": needs the `pg` peer dependency (types only at run time: you pass your own Pool).
export { FencedPostgres, type FencedPostgresOptions, type PgWriteOptions, type PgPutResult, type PgRecord } from "./postgres.js";
