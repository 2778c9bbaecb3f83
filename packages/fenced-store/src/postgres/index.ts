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
