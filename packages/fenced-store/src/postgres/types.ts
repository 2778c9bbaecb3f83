import type { JsonValue } from "../json.js";
import type { StoredVersion } from "../contract.js";

/**
 * The database as FencedPostgres uses it, described by shape rather than by pg's own classes, so
 * that a pg.Pool of whatever pg 8 version the application installed (or a wrapper around one)
 * type-checks: query(config), and connect() → a client with query(config) and release(err?).
 */

/** A bind parameter: every value travels as text (tokens and versions as decimal strings) or null. */
export type PgParam = string | null;

export interface PgQueryConfig {
  /** A prepared statement's name; absent for DDL and transaction control. */
  name?: string;
  text: string;
  values?: PgParam[];
  /**
   * Set on a put the store sends unordered only (Session.write, `after-answer`): pg's JavaScript client then
   * sends the statement's Sync, at which PostgreSQL commits it, only after the statement's answer
   * has arrived. A client that does not know it (pg-native) may ignore it.
   */
  rows?: number;
}

export interface PgQueryResult<R> {
  rows: R[];
  /** The command tag: COMMIT, or ROLLBACK for a COMMIT of a transaction that had failed. */
  command: string;
}

/**
 * One connection, checked out of the pool: what transaction() hands to its callback. A client that
 * can fail on its own (pg's: the server dies under it) must expose on/removeListener("error"): the
 * store listens while it holds the client, as pg requires of whoever checks one out.
 */
export interface PgClient {
  query<R = Record<string, unknown>>(config: PgQueryConfig): Promise<PgQueryResult<R>>;
  /** An error discards the connection instead of returning it to the pool. */
  release(err?: Error | boolean): void;
}

export interface PgPool<Client extends PgClient = PgClient> {
  query<R = Record<string, unknown>>(config: PgQueryConfig): Promise<PgQueryResult<R>>;
  connect(): Promise<Client>;
  /**
   * pg.Pool's callback form. The store calls it (Session.open), so that it listens to the client's
   * 'error' in the turn the pool hands it over; a pool with only the promise form satisfies this too
   * (it returns its promise and ignores the callback, which the store then uses). Typed `never` so
   * that TypeScript infers `Client` from a pg.Pool's promise form (it pairs overloads from the last one).
   */
  connect(callback: never): void;
}

export interface FencedPostgresOptions {
  /** Schema holding the store's tables; default "fenced". Must match /^[a-z_][a-z0-9_]{0,62}$/ and not start with "pg_". */
  readonly schema?: string | undefined;
  /**
   * Deadline of every call, in milliseconds (an integer from 100 to 600000; default 5000): from the
   * call to its answer, waiting for a pool client included, and for transaction() the callback and
   * COMMIT included. Past it the call fails with StoreUnavailableError (reason "timeout"), or with
   * OutcomeUnknownError when the write's commit (COMMIT, or a single-statement write's Sync) had
   * been sent. Inside the store's transactions
   * the server is told the same (SET LOCAL statement_timeout), so it gives up and rolls back too.
   */
  readonly timeoutMs?: number | undefined;
}

/** A record: its value, and which write of which lease produced this version (the contract's StoredVersion). */
export interface PgRecord<T = JsonValue> extends StoredVersion {
  readonly value: T;
}
