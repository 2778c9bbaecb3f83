import { InvalidArgumentError, type CheckedFence } from "@fenced/fence";
import { ResourceMismatchError, StaleTokenError, VersionMismatchError } from "../errors.js";
import { assertKey, type Fence } from "../fence.js";
import { assertJsonValue, type JsonValue } from "../json.js";
import { liveFence, signalOnly, throwIfAborted } from "../options.js";
import { assertPool, transferOptions, writeOptions } from "./options.js";
import type {
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
} from "./types.js";
import {
  BEGIN,
  COMMIT,
  FOREIGN_KEY_REFUSED,
  type NamedStatement,
  quoteSchema,
  ROLLBACK,
  statementNames,
  statements,
  type Statements,
  VERSION_REFUSED,
} from "./sql.js";

/** The fence's three leading parameters of every write statement. */
const fenceParams = (fence: CheckedFence): PgParam[] => [fence.resource, fence.token.toString(), fence.holder];

/**
 * Fenced writes to PostgreSQL. Every write raises the per-resource ratchet (table `fence`) and
 * writes the record in one transaction, the ratchet first. A token below the highest accepted for
 * its resource, or equal to it from another holder, is refused with StaleTokenError; a key owned by
 * another resource is refused with ResourceMismatchError; either way nothing changes. See
 * PROTOCOL.md, "Postgres".
 *
 * `Client` is what the pool's connect() returns (pg.PoolClient for a pg.Pool): transaction() hands
 * it to its callback.
 */
export class FencedPostgres<Client extends PgClient = PgClient> {
  readonly schema: string;
  private readonly sql: Statements;
  private readonly names: Record<NamedStatement, string>;

  constructor(
    private readonly pool: PgPool<Client>,
    options: FencedPostgresOptions = {},
  ) {
    assertPool(pool);
    if (typeof options !== "object" || options === null) throw new InvalidArgumentError("options", "must be an object { schema? }");
    const schema: unknown = options.schema === undefined ? "fenced" : options.schema;
    this.sql = statements(quoteSchema(schema));
    this.schema = schema as string;
    // Named (prepared) statements skip parse and plan after the first use on each connection.
    this.names = statementNames(this.sql);
  }

  /**
   * Creates the schema, tables, sequence and function if missing, and upgrades a layout created by
   * an earlier version (holder columns, tombstones). Idempotent; concurrent callers serialise on an
   * advisory lock.
   */
  async migrate(): Promise<void> {
    const lock: PgParam[] = [`fenced.migrate:${this.schema}`];
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query(this.query("migrateLock", lock));
      try {
        await client.query({ text: BEGIN });
        for (const ddl of this.sql.migrate) await client.query({ text: ddl });
        for (const ddl of await this.upgrades(client)) await client.query({ text: ddl });
        await client.query({ text: COMMIT });
      } catch (err) {
        await client.query({ text: ROLLBACK }).catch(() => undefined);
        throw err;
      } finally {
        await client.query(this.query("migrateUnlock", lock));
      }
    } catch (err) {
      // If the unlock (or anything) failed, discard the connection: closing it drops a session lock still held.
      broken = err instanceof Error ? err : new Error(String(err));
      throw err;
    } finally {
      client.release(broken);
    }
  }

  /** The ALTERs an older layout still needs; none on a current one (ALTER TABLE would lock the table for nothing). */
  private async upgrades(client: Client): Promise<string[]> {
    const { rows } = await client.query<{ table: string; column: string; notNull: boolean }>(this.query("layout", [this.schema]));
    const has = (table: string, column: string) => rows.find((r) => r.table === table && r.column === column);
    const needed: string[] = [];
    if (has("fence", "holder") === undefined) needed.push(this.sql.addFenceHolder);
    if (has("records", "holder") === undefined) needed.push(this.sql.addRecordHolder);
    if (has("records", "value")?.notNull === true) needed.push(this.sql.allowTombstones);
    return needed;
  }

  /**
   * Fence-on-acquire: raises the resource's ratchet to fence.token (and its holder) without writing a
   * record, so that every older holder is refused from now on, even for keys the new holder never writes.
   */
  async register(fence: Fence, options?: PgSignalOptions): Promise<void> {
    const checked = liveFence(fence);
    const signal = signalOnly(options);
    throwIfAborted(signal);
    const { rows } = await this.pool.query(this.query("ratchet", fenceParams(checked)));
    if (rows.length === 0) throw await this.staleError(this.pool, checked);
  }

  /**
   * Writes `value` under `key` if the fence passes its resource's ratchet, the key is unowned or
   * owned by fence.resource (a new key becomes fence.resource's), and, with ifVersion, the record is
   * still at that version. All-or-nothing.
   */
  async put(key: string, value: unknown, options: PgWriteOptions): Promise<PgPutResult> {
    assertKey(key);
    const { fence, ifVersion, signal } = writeOptions(options);
    assertJsonValue(value);
    const json = JSON.stringify(value);
    throwIfAborted(signal);
    if (ifVersion === undefined) {
      // The common case in a single statement: see sql.ts for why it is atomic, ordered, and undone whole when refused.
      let result: PgQueryResult<{ version: string }>;
      try {
        result = await this.pool.query<{ version: string }>(this.query("putUnconditional", [...fenceParams(fence), key, json]));
      } catch (err) {
        throw foreignKeyRefusal(err, key, fence.resource) ?? err;
      }
      const row = result.rows[0];
      if (row === undefined) throw await this.staleError(this.pool, fence);
      return { version: String(row.version), token: fence.token };
    }
    return this.conditional(fence, key, ifVersion, "putIfVersion", [...fenceParams(fence), key, json, ifVersion]);
  }

  /** The record under `key`, or undefined (never written, or deleted). Reading needs no fence: only writes are ordered. */
  async get<T = JsonValue>(key: string): Promise<PgRecord<T> | undefined> {
    assertKey(key);
    const { rows } = await this.pool.query<{ value: T; version: string; token: string; resource: string; holder: string | null }>(
      this.query("get", [key]),
    );
    const row = rows[0];
    if (row === undefined) return undefined;
    // pg returns int8 as a decimal string; BigInt keeps all 64 bits (a JS number would not).
    return { value: row.value, version: String(row.version), token: BigInt(row.token), resource: row.resource, holder: row.holder ?? null };
  }

  /**
   * Deletes the record under the same checks as put, leaving a tombstone that keeps the owner and
   * the version sequence: get() then says undefined, and only the owner can write the key again.
   * Always writes a tombstone, as S3's delete does: over a live record, over a tombstone, and for a
   * key never written, which then belongs to fence.resource. Resolves the tombstone's version and
   * the token that wrote it.
   */
  async delete(key: string, options: PgWriteOptions): Promise<PgPutResult> {
    assertKey(key);
    const { fence, ifVersion, signal } = writeOptions(options);
    throwIfAborted(signal);
    if (ifVersion !== undefined) return this.conditional(fence, key, ifVersion, "deleteIfVersion", [...fenceParams(fence), key, ifVersion]);
    return this.fenced(fence, signal, async (client) => {
      const { rows } = await this.run<{ version: string }>(client, signal, "tombstone", [...fenceParams(fence), key]);
      const row = rows[0];
      if (row !== undefined) return { version: String(row.version), token: fence.token };
      const now = await this.current(client, signal, key);
      if (now !== undefined && now.resource !== fence.resource) throw new ResourceMismatchError(key, fence.resource, now.resource);
      throw new Error(
        `delete of ${JSON.stringify(key)} wrote no tombstone although the key is ${JSON.stringify(fence.resource)}'s; written outside the store?`,
      );
    });
  }

  /**
   * Moves `key` (a live record or a tombstone) from the resource that owns it to another. Both fences
   * must pass their own resource's ratchet (both are raised, in resource order), the key must be
   * owned by from.resource (else ResourceMismatchError), and with ifVersion the record must be at
   * that version. The record gets a new version, and to's token and holder. All-or-nothing; resolves
   * undefined, writing nothing, if the key was never written.
   */
  async transfer(key: string, options: PgTransferOptions): Promise<PgPutResult | undefined> {
    assertKey(key);
    const { from, to, ifVersion, signal } = transferOptions(options);
    throwIfAborted(signal);
    return this.inTransaction(
      signal,
      async (client) => {
        // Every transfer locks the two fence rows in the same (resource) order: no deadlock between transfers.
        const [first, second] = from.resource < to.resource ? [from, to] : [to, from];
        const { rows } = await this.run<{ resource: string }>(client, signal, "ratchetPair", [
          ...fenceParams(first),
          ...fenceParams(second),
        ]);
        for (const fence of [from, to]) if (!rows.some((r) => r.resource === fence.resource)) throw await this.staleError(client, fence);
        const moved = await this.run<{ version: string }>(client, signal, "transferOwner", [
          from.resource,
          ...fenceParams(to),
          key,
          ifVersion ?? null,
        ]);
        const row = moved.rows[0];
        if (row !== undefined) return { version: String(row.version), token: to.token };
        const now = await this.current(client, signal, key);
        if (now === undefined && ifVersion === undefined) return undefined;
        if (now !== undefined && now.resource !== from.resource) throw new ResourceMismatchError(key, from.resource, now.resource);
        if (ifVersion === undefined)
          throw new Error(
            `transfer of ${JSON.stringify(key)} found it owned by ${JSON.stringify(from.resource)} only after the move missed it; written outside the store?`,
          );
        throw new VersionMismatchError(key, ifVersion, now === undefined || now.deleted ? undefined : now.version);
      },
      // A key that does not exist: nothing moved, so the ratchet raises are not kept either.
      (result) => result !== undefined,
    );
  }

  /**
   * Runs `work` in a transaction that has already passed the ratchet for `fence`, and commits if it
   * resolves (and the signal is not aborted by then). A stale fence runs none of it. The fence row
   * stays locked until COMMIT, so every other writer of the resource waits, and `work`'s statements
   * see everything such writers committed before. Do not COMMIT/ROLLBACK inside `work`: that would
   * end the fenced transaction early. Ownership of keys is not checked for the caller's own SQL.
   */
  async transaction<T>(fence: Fence, work: (client: Client) => Promise<T>, options?: PgSignalOptions): Promise<T> {
    const checked = liveFence(fence);
    if (typeof work !== "function") throw new InvalidArgumentError("work", "must be a function (client) => Promise");
    const signal = signalOnly(options);
    throwIfAborted(signal);
    return this.fenced(checked, signal, work);
  }

  /** BEGIN; ratchet; work; COMMIT. The ratchet runs first so its row lock orders everything after it. */
  private fenced<T>(fence: CheckedFence, signal: AbortSignal | undefined, work: (client: Client) => Promise<T>): Promise<T> {
    return this.inTransaction(signal, async (client) => {
      const { rows } = await this.run(client, signal, "ratchet", fenceParams(fence));
      if (rows.length === 0) throw await this.staleError(client, fence);
      return work(client);
    });
  }

  /**
   * Ratchet and conditional write in one statement, in autocommit: one round trip. Refused in any
   * way, the statement writes nothing and leaves the ratchet as it was (sql.ts, putIfVersion, says
   * why that holds against concurrent writers). Zero rows back: the fence is stale; a refusal for the
   * owner or the version is an error raised by the statement itself, recognised by its SQLSTATE.
   */
  private async conditional(
    fence: CheckedFence,
    key: string,
    expected: string,
    name: "putIfVersion" | "deleteIfVersion",
    values: PgParam[],
  ): Promise<PgPutResult> {
    let result: PgQueryResult<{ version: string }>;
    try {
      result = await this.pool.query<{ version: string }>(this.query(name, values));
    } catch (err) {
      throw foreignKeyRefusal(err, key, fence.resource) ?? versionRefusal(err, key, expected) ?? err;
    }
    const row = result.rows[0];
    if (row === undefined) throw await this.staleError(this.pool, fence);
    return { version: String(row.version), token: fence.token };
  }

  /**
   * BEGIN; work; COMMIT — or ROLLBACK if work throws, `commit` declines its result, or the signal was
   * aborted. The signal is checked before every statement the operation sends and last before
   * COMMIT: an abort is honoured at the next statement boundary, never inside a statement.
   */
  private async inTransaction<T>(
    signal: AbortSignal | undefined,
    work: (client: Client) => Promise<T>,
    commit: (result: T) => boolean = () => true,
  ): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    let begun = false;
    try {
      throwIfAborted(signal); // waiting for a connection may have taken a while
      await client.query({ text: BEGIN });
      begun = true;
      const result = await work(client);
      throwIfAborted(signal); // the last moment at which nothing is written: an abort rolls back
      if (!commit(result)) {
        begun = false;
        await client.query({ text: ROLLBACK });
        return result;
      }
      const done = await client.query({ text: COMMIT });
      // A transaction in which a statement failed (and the error was swallowed) "commits" as ROLLBACK.
      if (done.command !== "COMMIT")
        throw new Error(`the transaction was rolled back by the server (${done.command}); nothing was written`);
      return result;
    } catch (err) {
      if (begun) {
        try {
          await client.query({ text: ROLLBACK });
        } catch (rollbackError) {
          // Connection state unknown: make the pool discard this client rather than reuse it mid-transaction.
          broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
        }
      }
      throw err;
    } finally {
      client.release(broken);
    }
  }

  /** One statement of a multi-statement operation: not sent once the signal is aborted. */
  private run<R = Record<string, unknown>>(
    client: Client,
    signal: AbortSignal | undefined,
    name: NamedStatement,
    values: PgParam[],
  ): Promise<PgQueryResult<R>> {
    throwIfAborted(signal);
    return client.query<R>(this.query(name, values));
  }

  /** The key's row as it is now, tombstones included; read inside the operation's transaction. */
  private async current(
    client: Client,
    signal: AbortSignal | undefined,
    key: string,
  ): Promise<{ version: string; resource: string; deleted: boolean } | undefined> {
    const { rows } = await this.run<{ version: string; resource: string; deleted: boolean }>(client, signal, "current", [key]);
    const row = rows[0];
    return row === undefined ? undefined : { version: String(row.version), resource: row.resource, deleted: row.deleted };
  }

  /**
   * Called after the ratchet refused: a token above ours, or ours from another holder, was committed;
   * tokens never go down, so a fresh read shows one or the other.
   */
  private async staleError(db: Pick<PgClient, "query">, fence: CheckedFence): Promise<StaleTokenError> {
    const { rows } = await db.query<{ token: string; holder: string | null }>(this.query("highest", [fence.resource]));
    const highest = rows[0];
    if (highest === undefined)
      throw new Error(`the ratchet refused token ${fence.token} for ${JSON.stringify(fence.resource)} but no fence row exists`);
    return new StaleTokenError(fence.resource, fence.token, BigInt(highest.token), highest.holder ?? null);
  }

  private query(name: NamedStatement, values: PgParam[]): PgQueryConfig {
    return { name: this.names[name], text: this.sql[name], values };
  }
}

/** The error fields a refusal raised by a statement carries. */
function sqlError(err: unknown): { code?: unknown; detail?: unknown } {
  return typeof err === "object" && err !== null ? err : {};
}

/** A write's refusal for a key owned by another resource, recognised by its SQLSTATE; the owner travels in DETAIL. */
function foreignKeyRefusal(err: unknown, key: string, resource: string): ResourceMismatchError | undefined {
  const { code, detail } = sqlError(err);
  if (code !== FOREIGN_KEY_REFUSED || typeof detail !== "string" || detail === "") return undefined;
  return new ResourceMismatchError(key, resource, detail);
}

/** A conditional write's refusal for the version, recognised by its SQLSTATE; DETAIL is the live version, or '' when there is none. */
function versionRefusal(err: unknown, key: string, expected: string): VersionMismatchError | undefined {
  const { code, detail } = sqlError(err);
  if (code !== VERSION_REFUSED || typeof detail !== "string") return undefined;
  return new VersionMismatchError(key, expected, detail === "" ? undefined : detail);
}
