import type { Pool, PoolClient, QueryConfig } from "pg";
import { StaleTokenError, VersionMismatchError } from "./errors.js";
import { assertFence, assertKey, MAX_TOKEN, type Fence } from "./fence.js";
import { assertJsonValue, type JsonValue } from "./json.js";
import { BEGIN, COMMIT, quoteSchema, ROLLBACK, statements, type Statements } from "./sql.js";

export interface FencedPostgresOptions {
  /** Schema holding the `fence` and `records` tables; default "fenced". Must match /^[a-z_][a-z0-9_]{0,62}$/. */
  readonly schema?: string;
}

export interface PgWriteOptions {
  /** The lease's fence. The write is refused (StaleTokenError) if a higher token was accepted for fence.resource. */
  readonly fence: Fence;
  /** Write only if the record is still at this version (from get/put); else VersionMismatchError. */
  readonly ifVersion?: string;
}

export interface PgPutResult {
  /** Opaque; pass it back as ifVersion. Never reused, not even after a delete. */
  readonly version: string;
  /** The token the write was accepted under. */
  readonly token: bigint;
}

export interface PgRecord<T = JsonValue> {
  readonly value: T;
  readonly version: string;
  /** Token of the write that produced this version. */
  readonly token: bigint;
  /** Resource whose fence that write carried: a record belongs to whichever resource last wrote it. */
  readonly resource: string;
}

// Versions are decimal renderings of a positive bigint sequence value; anything else was not issued by us.
const VERSION = /^[1-9][0-9]{0,18}$/;

function assertVersion(version: unknown): asserts version is string {
  if (typeof version !== "string") throw new TypeError(`ifVersion must be a string (a version returned by put/get), got ${typeof version}`);
  if (!VERSION.test(version) || BigInt(version) > MAX_TOKEN) throw new RangeError(`ifVersion ${JSON.stringify(version)} is not a version this store issues`);
}

function writeOptions(options: unknown): { fence: Fence; ifVersion: string | undefined } {
  if (typeof options !== "object" || options === null) throw new TypeError("options must be an object { fence, ifVersion? }");
  const { fence, ifVersion } = options as { fence?: unknown; ifVersion?: unknown };
  assertFence(fence);
  if (ifVersion !== undefined) assertVersion(ifVersion);
  // Copy now: a caller mutating its fence object during the await must not change what we check.
  return { fence: { resource: fence.resource, token: fence.token }, ifVersion };
}

type Param = string | null;

/**
 * Fenced writes to PostgreSQL. Every write raises the per-resource ratchet (table `fence`) and
 * writes the record in one transaction, the ratchet first; a token lower than the highest accepted
 * for its resource is refused with StaleTokenError and nothing changes. See PROTOCOL.md, "Postgres".
 */
export class FencedPostgres {
  readonly schema: string;
  private readonly sql: Statements;
  private readonly names: Record<keyof Statements, string>;

  constructor(
    private readonly pool: Pool,
    options: FencedPostgresOptions = {},
  ) {
    if (typeof pool !== "object" || pool === null || typeof pool.query !== "function" || typeof pool.connect !== "function") {
      throw new TypeError("FencedPostgres needs a pg.Pool");
    }
    const schema = options.schema ?? "fenced";
    this.sql = statements(quoteSchema(schema));
    this.schema = schema;
    // Named (prepared) statements skip parse and plan after the first use on each connection.
    // The schema is part of the name: two stores on one pool must not share a prepared text.
    const names = {} as Record<keyof Statements, string>;
    for (const k of Object.keys(this.sql) as (keyof Statements)[]) names[k] = `fenced.${schema}.${k}`;
    this.names = names;
  }

  /** Creates the schema, tables and sequence if missing. Idempotent; concurrent callers serialise on an advisory lock. */
  async migrate(): Promise<void> {
    const lock = [`fenced.migrate:${this.schema}`];
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query(this.sql.migrateLock, lock);
      try {
        await client.query(BEGIN);
        for (const ddl of this.sql.migrate) await client.query(ddl);
        await client.query(COMMIT);
      } catch (err) {
        await client.query(ROLLBACK).catch(() => undefined);
        throw err;
      } finally {
        await client.query(this.sql.migrateUnlock, lock);
      }
    } catch (err) {
      // If the unlock (or anything) failed, discard the connection: closing it drops a session lock still held.
      broken = err instanceof Error ? err : new Error(String(err));
      throw err;
    } finally {
      client.release(broken);
    }
  }

  /**
   * Fence-on-acquire: raises the resource's ratchet to fence.token without writing a record, so that
   * every older holder is refused from now on, even for keys the new holder never writes.
   */
  async register(fence: Fence): Promise<void> {
    assertFence(fence);
    const f = { resource: fence.resource, token: fence.token };
    const { rows } = await this.pool.query(this.query("ratchet", [f.resource, f.token.toString()]));
    if (rows.length === 0) throw await this.staleError(this.pool, f);
  }

  /**
   * Writes `value` under `key` if fence.token is not lower than the highest accepted for fence.resource
   * (and, with ifVersion, if the record is still at that version). All-or-nothing.
   */
  async put(key: string, value: unknown, options: PgWriteOptions): Promise<PgPutResult> {
    assertKey(key);
    const { fence, ifVersion } = writeOptions(options);
    assertJsonValue(value);
    const json = JSON.stringify(value);
    const token = fence.token.toString();
    if (ifVersion === undefined) {
      // The common case in a single statement: see sql.ts for why it is atomic and ordered.
      const { rows } = await this.pool.query<{ version: string }>(this.query("putUnconditional", [fence.resource, token, key, json]));
      const row = rows[0];
      if (row === undefined) throw await this.staleError(this.pool, fence);
      return { version: String(row.version), token: fence.token };
    }
    return this.conditional(fence, key, ifVersion, this.query("putIfVersion", [fence.resource, token, key, json, ifVersion]));
  }

  /** The record under `key`, or undefined. Reading needs no fence: only writes are ordered. */
  async get<T = JsonValue>(key: string): Promise<PgRecord<T> | undefined> {
    assertKey(key);
    const { rows } = await this.pool.query<{ value: T; version: string; token: string; resource: string }>(this.query("get", [key]));
    const row = rows[0];
    if (row === undefined) return undefined;
    // pg returns int8 as a decimal string; BigInt keeps all 64 bits (a JS number would not).
    return { value: row.value, version: String(row.version), token: BigInt(row.token), resource: row.resource };
  }

  /** Deletes the record under the same checks as put. Resolves true if a record was removed. */
  async delete(key: string, options: PgWriteOptions): Promise<boolean> {
    assertKey(key);
    const { fence, ifVersion } = writeOptions(options);
    if (ifVersion !== undefined) {
      await this.conditional(fence, key, ifVersion, this.query("deleteIfVersion", [fence.resource, fence.token.toString(), key, ifVersion]));
      return true;
    }
    return this.fenced(fence, async (client) => {
      const { rows } = await client.query(this.query("deleteAny", [key]));
      return rows.length > 0;
    });
  }

  /**
   * Runs `work` in a transaction that has already passed the ratchet for `fence`, and commits if it
   * resolves. A stale fence runs none of it. The fence row stays locked until COMMIT, so every other
   * writer of the resource waits, and `work`'s statements see everything such writers committed before.
   * Do not COMMIT/ROLLBACK inside `work`: that would end the fenced transaction early.
   */
  async transaction<T>(fence: Fence, work: (client: PoolClient) => Promise<T>): Promise<T> {
    assertFence(fence);
    if (typeof work !== "function") throw new TypeError("transaction(fence, work): work must be a function");
    return this.fenced({ resource: fence.resource, token: fence.token }, work);
  }

  /** BEGIN; ratchet; work; COMMIT. The ratchet runs first so its row lock orders everything after it. */
  private fenced<T>(fence: Fence, work: (client: PoolClient) => Promise<T>): Promise<T> {
    return this.inTransaction(async (client) => {
      const { rows } = await client.query(this.query("ratchet", [fence.resource, fence.token.toString()]));
      if (rows.length === 0) throw await this.staleError(client, fence);
      return work(client);
    });
  }

  /**
   * BEGIN; ratchet and conditional write in one statement; COMMIT. Refused either way, the
   * transaction rolls back, so a version mismatch does not leave the ratchet raised either.
   */
  private conditional(fence: Fence, key: string, expected: string, statement: QueryConfig<Param[]>): Promise<PgPutResult> {
    return this.inTransaction(async (client) => {
      const { rows } = await client.query<{ token: string | null; version: string | null }>(statement);
      const row = rows[0];
      if (row === undefined || row.token === null) throw await this.staleError(client, fence);
      if (row.version === null) throw await this.mismatch(client, key, expected);
      return { version: String(row.version), token: fence.token };
    });
  }

  private async inTransaction<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query(BEGIN);
      const result = await work(client);
      const commit = await client.query(COMMIT);
      // A transaction in which a statement failed (and the error was swallowed) "commits" as ROLLBACK.
      if (commit.command !== "COMMIT") throw new Error(`the transaction was rolled back by the server (${commit.command}); nothing was written`);
      return result;
    } catch (err) {
      try {
        await client.query(ROLLBACK);
      } catch (rollbackError) {
        // Connection state unknown: make the pool discard this client rather than reuse it mid-transaction.
        broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
      }
      throw err;
    } finally {
      client.release(broken);
    }
  }

  /**
   * Called after the ratchet refused: some token above ours was committed, and tokens never go down,
   * so a fresh read returns a value above ours.
   */
  private async staleError(db: Pool | PoolClient, fence: Fence): Promise<StaleTokenError> {
    const { rows } = await db.query<{ token: string }>(this.query("highest", [fence.resource]));
    const highest = rows[0]?.token;
    if (highest === undefined) throw new Error(`the ratchet refused token ${fence.token} for ${JSON.stringify(fence.resource)} but no fence row exists`);
    return new StaleTokenError(fence.resource, fence.token, BigInt(highest));
  }

  private async mismatch(client: PoolClient, key: string, expected: string): Promise<VersionMismatchError> {
    const { rows } = await client.query<{ version: string }>(this.query("currentVersion", [key]));
    const actual = rows[0]?.version;
    return new VersionMismatchError(key, expected, actual === undefined ? undefined : String(actual));
  }

  private query(name: Exclude<keyof Statements, "migrate">, values: Param[]): QueryConfig<Param[]> {
    return { name: this.names[name], text: this.sql[name], values };
  }
}
