// "@fenced/store/postgres": needs the `pg` peer dependency at run time only as the pool you pass in;
// the types describe the pool by shape, so any pg 8 version (or a wrapper) type-checks. The public API only.
//
// The layers, from the API down:
//   store.ts    FencedPostgres: validates a call (options.ts) and runs its statements in one transaction
//   batch.ts    the writes under several fences: every ratchet in one statement, in lock order; putAll() in one statement, or as a transaction naming its refusal
//   calls.ts    how a call runs: its session, the store's transactions, its statements by name, a write at the fence the row holds first (fencedWrite)
//   commit-at.ts when each single-statement write's commit (Sync) leaves: with the statement, or after its answer
//   fence-lock.ts the per-resource advisory lock taken before any fence row: shared by one lease's writes, exclusive by raises
//   migrate.ts  migrate(): the tables, function and upgrades, in one transaction under an advisory lock
//   inspect.ts  fence(): a resource's fence row; the StaleTokenError a refused write reads
//   session.ts  one client checked out per call: its deadline (../deadline.ts), its error listener, its release
//   failures.ts what a failure of the driver becomes (StoreUnavailable, OutcomeUnknown, StoreSetup)
//   refusals.ts the store's own refusals raised by a statement (owner, version, a stale fence of putAll)
//   sql.ts      every statement, documented: the ratchet in the writing transaction (PROTOCOL.md "Postgres"), the lock order
//   upsert-sql.ts the record upserts a write ends in, after its ratchet, and putAll() in one statement
//   schema-sql.ts the layout migrate() creates: tables, version sequence, refusal functions and their SQLSTATEs
//   types.ts    the pool, client and results by shape
//   ../observe.ts each call and statement as an OpenTelemetry span, each write's outcome on node:diagnostics_channel
export { FencedPostgres } from "./store.js";
// How many records one putAll() writes at most (every fence row of the call is held meanwhile).
export { MAX_PUT_ALL } from "./options.js";
export type { FencedPostgresOptions, PgPool } from "./types.js";

// Names this entry exported in 0.1.0 that a user names through the API itself; each goes in 0.3.0.
import type { JsonValue } from "../json.js";
import { sqlState as readSqlState } from "./failures.js";
import type * as types from "./types.js";
/** @deprecated The client `transaction()` hands its callback, by shape (a pg `PoolClient` satisfies it); removed from `@fenced/store/postgres` in 0.3.0. */
export type PgClient = types.PgClient;
/** @deprecated A statement's parameter, the store's own; removed from `@fenced/store/postgres` in 0.3.0. */
export type PgParam = types.PgParam;
/** @deprecated `{ text, values?, name? }`, the statement a client is sent; removed from `@fenced/store/postgres` in 0.3.0. */
export type PgQueryConfig = types.PgQueryConfig;
/** @deprecated `Parameters<FencedPostgres["putAll"]>[1]` names it; removed from `@fenced/store/postgres` in 0.3.0. */
export type PgPutAllOptions = types.PgPutAllOptions;
/** @deprecated `Parameters<FencedPostgres["putAll"]>[0][number]` names it; removed from `@fenced/store/postgres` in 0.3.0. */
export type PgPutAllWrite = types.PgPutAllWrite;
/** @deprecated `Awaited<ReturnType<FencedPostgres["put"]>>` names it; removed from `@fenced/store/postgres` in 0.3.0. */
export type PgPutResult = types.PgPutResult;
/** @deprecated `{ signal?: AbortSignal }`; removed from `@fenced/store/postgres` in 0.3.0. */
export type PgSignalOptions = types.PgSignalOptions;
/** @deprecated `Parameters<FencedPostgres["transfer"]>[1]` names it; removed from `@fenced/store/postgres` in 0.3.0. */
export type PgTransferOptions = types.PgTransferOptions;
/** @deprecated `Parameters<FencedPostgres["put"]>[2]` names it; removed from `@fenced/store/postgres` in 0.3.0. */
export type PgWriteOptions = types.PgWriteOptions;
/** @deprecated `Awaited<ReturnType<PgPool["query"]>>` names it; removed from `@fenced/store/postgres` in 0.3.0. */
export type PgQueryResult<R> = types.PgQueryResult<R>;
/** @deprecated `NonNullable<Awaited<ReturnType<FencedPostgres["get"]>>>` names it; removed from `@fenced/store/postgres` in 0.3.0. */
export type PgRecord<T = JsonValue> = types.PgRecord<T>;
/** @deprecated Branch on the store's errors' classes and `code`; removed from `@fenced/store/postgres` in 0.3.0. */
export const sqlState: typeof readSqlState = readSqlState;
