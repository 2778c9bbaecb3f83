import { InvalidArgumentError, type CheckedFence } from "@fenced/fence";
import { ResourceMismatchError, type StaleTokenError, VersionMismatchError } from "../errors.js";
import { foreignKeyRefusal, versionRefusal } from "./refusals.js";
import { assertKey, assertResource, type Fence } from "../fence.js";
import { assertJsonValue, type JsonValue } from "../json.js";
import { liveFence, signalOnly, throwIfAborted } from "../options.js";
import { assertPool, timeoutOption, transferOptions, writeOptions } from "./options.js";
import { readFence, staleError } from "./inspect.js";
import { migrateWithin } from "./migrate.js";
import { CallbackError, Session, type Call } from "./session.js";
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
import { beginWithin, COMMIT, type NamedStatement, quoteSchema, ROLLBACK, statementNames, statements, type Statements } from "./sql.js";

/** The fence's three leading parameters of every write statement. */
const fenceParams = (fence: CheckedFence): PgParam[] => [fence.resource, fence.token.toString(), fence.holder];

/**
 * Fenced writes to PostgreSQL. Every write raises the per-resource ratchet (table `fence`) and
 * writes the record in one transaction, the ratchet first. A token below the highest accepted for
 * its resource, or equal to it from another holder, is refused with StaleTokenError; a key owned by
 * another resource is refused with ResourceMismatchError; either way nothing changes. See
 * PROTOCOL.md, "Postgres".
 *
 * Every call has a deadline (options.timeoutMs) and fails with a typed error when PostgreSQL is
 * down, paused or cuts the connection: StoreUnavailableError when nothing was applied,
 * OutcomeUnknownError when a write's commit (a COMMIT, or a single-statement write's Sync) was sent
 * and the answer lost, StoreSetupError when migrate() has not run (failures.ts holds the rule).
 *
 * `Client` is what the pool's connect() returns (pg.PoolClient for a pg.Pool): transaction() hands
 * it to its callback.
 */
export class FencedPostgres<Client extends PgClient = PgClient> {
  readonly schema: string;
  /** The deadline of every call, in milliseconds. */
  readonly timeoutMs: number;
  private readonly sql: Statements;
  private readonly names: Record<NamedStatement, string>;

  constructor(
    private readonly pool: PgPool<Client>,
    options: FencedPostgresOptions = {},
  ) {
    assertPool(pool);
    if (typeof options !== "object" || options === null)
      throw new InvalidArgumentError("options", "must be an object { schema?, timeoutMs? }");
    const schema: unknown = options.schema === undefined ? "fenced" : options.schema;
    this.sql = statements(quoteSchema(schema));
    this.schema = schema as string;
    this.timeoutMs = timeoutOption(options.timeoutMs);
    // Named (prepared) statements skip parse and plan after the first use on each connection.
    this.names = statementNames(this.sql);
  }

  /**
   * Creates the schema, tables, sequence and function if missing, and upgrades a layout created by
   * an earlier version (holder columns, tombstones). Idempotent; concurrent callers serialise on an
   * advisory lock.
   */
  async migrate(): Promise<void> {
    await this.session({ operation: "migrate" }, (s) =>
      migrateWithin(s, this.sql, this.schema, (name, values) => this.query(name, values)),
    );
  }

  /**
   * Fence-on-acquire: raises the resource's ratchet to fence.token (and its holder) without writing a
   * record, so that every older holder is refused from now on, even for keys the new holder never writes.
   */
  async register(fence: Fence, options?: PgSignalOptions): Promise<void> {
    const checked = liveFence(fence);
    const signal = signalOnly(options);
    throwIfAborted(signal);
    await this.session(
      { operation: "register" },
      async (s) => {
        throwIfAborted(signal); // waiting for a connection may have taken a while
        // One statement, committed only once its answer is in (Session.write).
        const { rows } = await s.write(this.query("ratchet", fenceParams(checked)));
        if (rows.length === 0) throw await this.staleError(s, checked);
      },
      signal,
    );
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
      return this.session(
        { operation: "put", key },
        async (s) => {
          let result: PgQueryResult<{ version: string }>;
          try {
            result = await s.write<{ version: string }>(this.query("putUnconditional", [...fenceParams(fence), key, json]));
          } catch (err) {
            throw foreignKeyRefusal(err, key, fence.resource) ?? err;
          }
          const row = result.rows[0];
          if (row === undefined) throw await this.staleError(s, fence);
          return { version: String(row.version), token: fence.token };
        },
        signal,
      );
    }
    return this.conditional({ operation: "put", key }, fence, ifVersion, "putIfVersion", [...fenceParams(fence), key, json, ifVersion]);
  }

  /**
   * The resource's fence as the ratchet holds it: the highest token admitted and the holder that
   * presented it (null: a fence without a holder) — the very row every write's check compares
   * against — or undefined if no write or register() for the resource has committed. A plain read of
   * what is committed: it takes no lock, and a write still in flight shows once it commits.
   */
  async fence(resource: string, options?: PgSignalOptions): Promise<CheckedFence | undefined> {
    assertResource(resource);
    const signal = signalOnly(options);
    throwIfAborted(signal);
    return this.session(
      { operation: "fence" },
      (s) => {
        throwIfAborted(signal); // waiting for a connection may have taken a while
        return readFence(s, this.query("highest", [resource]), resource);
      },
      signal,
    );
  }

  /** The record under `key`, or undefined (never written, or deleted). Reading needs no fence: only writes are ordered. */
  async get<T = JsonValue>(key: string): Promise<PgRecord<T> | undefined> {
    assertKey(key);
    const { rows } = await this.session({ operation: "get", key }, (s) =>
      s.query<{ value: T; version: string; token: string; resource: string; holder: string | null }>(this.query("get", [key]), "read"),
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
    const call = { operation: "delete", key };
    if (ifVersion !== undefined)
      return this.conditional(call, fence, ifVersion, "deleteIfVersion", [...fenceParams(fence), key, ifVersion]);
    return this.fenced(call, fence, signal, async (s) => {
      const { rows } = await this.run<{ version: string }>(s, signal, "tombstone", [...fenceParams(fence), key]);
      const row = rows[0];
      if (row !== undefined) return { version: String(row.version), token: fence.token };
      const now = await this.current(s, signal, key);
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
      { operation: "transfer", key },
      signal,
      async (s) => {
        // Every transfer locks the two fence rows in the same (resource) order: no deadlock between transfers.
        const [first, second] = from.resource < to.resource ? [from, to] : [to, from];
        const { rows } = await this.run<{ resource: string }>(s, signal, "ratchetPair", [...fenceParams(first), ...fenceParams(second)]);
        for (const fence of [from, to]) if (!rows.some((r) => r.resource === fence.resource)) throw await this.staleError(s, fence);
        const moved = await this.run<{ version: string }>(s, signal, "transferOwner", [
          from.resource,
          ...fenceParams(to),
          key,
          ifVersion ?? null,
        ]);
        const row = moved.rows[0];
        if (row !== undefined) return { version: String(row.version), token: to.token };
        const now = await this.current(s, signal, key);
        if (now === undefined && ifVersion === undefined) return undefined;
        if (now !== undefined && now.resource !== from.resource) throw new ResourceMismatchError(key, from.resource, now.resource);
        if (ifVersion === undefined)
          throw new Error(
            `transfer of ${JSON.stringify(key)} found it owned by ${JSON.stringify(from.resource)} only after the move missed it; written outside the store?`,
          );
        throw new VersionMismatchError(key, ifVersion, now === undefined || now.deleted ? undefined : now.version);
      },
      // A key that does not exist: nothing moved, so the ratchet raises are not kept either.
      { commit: (result) => result !== undefined },
    );
  }

  /**
   * Runs `work` in a transaction that has already passed the ratchet for `fence`, and commits if it
   * resolves (and the signal is not aborted by then). A stale fence runs none of it. The fence row
   * stays locked until COMMIT, so every other writer of the resource waits, and `work`'s statements
   * see everything such writers committed before. Do not COMMIT/ROLLBACK inside `work`: that would
   * end the fenced transaction early. Ownership of keys is not checked for the caller's own SQL.
   *
   * The deadline (timeoutMs) covers the whole call: the wait for a client, BEGIN, the ratchet, `work`
   * and COMMIT. Each of `work`'s statements is also bounded on the server by the time left at BEGIN
   * (SET LOCAL statement_timeout). When the deadline passes while `work` runs, the connection is
   * closed under it (its statements fail, the transaction is rolled back) and the call fails with
   * StoreUnavailableError "timeout" at once. An error `work` throws passes through unchanged, unless
   * the connection broke or the deadline passed meanwhile (then StoreUnavailableError, the error as
   * its cause); either way nothing is committed.
   */
  async transaction<T>(fence: Fence, work: (client: Client) => Promise<T>, options?: PgSignalOptions): Promise<T> {
    const checked = liveFence(fence);
    if (typeof work !== "function") throw new InvalidArgumentError("work", "must be a function (client) => Promise");
    const signal = signalOnly(options);
    throwIfAborted(signal);
    return this.fenced({ operation: "transaction" }, checked, signal, (s) => s.callback(() => work(s.client)));
  }

  /** BEGIN; ratchet; work; COMMIT. The ratchet runs first so its row lock orders everything after it. */
  private fenced<T>(
    call: Call,
    fence: CheckedFence,
    signal: AbortSignal | undefined,
    work: (s: Session<Client>) => Promise<T>,
    options?: TransactionOptions<T>,
  ): Promise<T> {
    return this.inTransaction(
      call,
      signal,
      async (s) => {
        const { rows } = await this.run(s, signal, "ratchet", fenceParams(fence));
        if (rows.length === 0) throw await this.staleError(s, fence);
        return work(s);
      },
      options,
    );
  }

  /**
   * Ratchet and conditional write in one statement, committed once its answer is in (Session.write).
   * Refused in any way, the statement writes nothing and leaves the ratchet as it was (sql.ts, putIfVersion, says
   * why that holds against concurrent writers). Zero rows back: the fence is stale; a refusal for the
   * owner or the version is an error raised by the statement itself, recognised by its SQLSTATE.
   */
  private conditional(
    call: Call & { readonly key: string },
    fence: CheckedFence,
    expected: string,
    name: "putIfVersion" | "deleteIfVersion",
    values: PgParam[],
  ): Promise<PgPutResult> {
    const { key } = call;
    return this.session(call, async (s) => {
      let result: PgQueryResult<{ version: string }>;
      try {
        result = await s.write<{ version: string }>(this.query(name, values));
      } catch (err) {
        throw foreignKeyRefusal(err, key, fence.resource) ?? versionRefusal(err, key, expected) ?? err;
      }
      const row = result.rows[0];
      if (row === undefined) throw await this.staleError(s, fence);
      return { version: String(row.version), token: fence.token };
    });
  }

  /**
   * BEGIN; work; COMMIT — or ROLLBACK if work throws, `commit` declines its result, or the signal was
   * aborted. The signal is checked before every statement the operation sends and last before
   * COMMIT: an abort is honoured at the next statement boundary, never inside a statement. COMMIT is
   * the only statement whose lost answer leaves the outcome unknown; it is never sent after a failure.
   */
  private inTransaction<T>(
    call: Call,
    signal: AbortSignal | undefined,
    work: (s: Session<Client>) => Promise<T>,
    options: TransactionOptions<T> = {},
  ): Promise<T> {
    const { commit = () => true } = options;
    return this.session(
      call,
      async (s) => {
        let begun = false;
        try {
          throwIfAborted(signal); // waiting for a connection may have taken a while
          await s.query({ text: beginWithin(s.remainingMs()) }, "read");
          begun = true;
          const result = await work(s);
          throwIfAborted(signal); // the last moment at which nothing is written: an abort rolls back
          if (!commit(result)) {
            begun = false;
            // Nothing to keep: a ROLLBACK that fails leaves a discarded connection, which rolls back too.
            await s.rollback(ROLLBACK);
            return result;
          }
          begun = false;
          const done = await s.query({ text: COMMIT }, "commit");
          // A transaction in which a statement failed (and the error was swallowed) "commits" as ROLLBACK.
          if (done.command !== "COMMIT")
            throw new Error(`the transaction was rolled back by the server (${done.command}); nothing was written`);
          return result;
        } catch (err) {
          if (begun) await s.rollback(ROLLBACK);
          // The callback's error was judged when it was caught (Session.callback), before this ROLLBACK.
          throw err instanceof CallbackError ? err.error : err;
        }
      },
      signal,
    );
  }

  /** Runs `work` on a client checked out for this call, within the call's deadline; the client is released however it ends. */
  private async session<T>(call: Call, work: (s: Session<Client>) => Promise<T>, signal?: AbortSignal): Promise<T> {
    const s = await Session.open(this.pool, call, this.timeoutMs, signal);
    try {
      return await work(s);
    } finally {
      s.release();
    }
  }

  /** One statement of a multi-statement operation: not sent once the signal is aborted. */
  private run<R = Record<string, unknown>>(
    s: Session<Client>,
    signal: AbortSignal | undefined,
    name: NamedStatement,
    values: PgParam[],
  ): Promise<PgQueryResult<R>> {
    throwIfAborted(signal);
    // Before COMMIT: a failure here leaves nothing applied.
    return s.query<R>(this.query(name, values), "read");
  }

  /** The key's row as it is now, tombstones included; read inside the operation's transaction. */
  private async current(
    s: Session<Client>,
    signal: AbortSignal | undefined,
    key: string,
  ): Promise<{ version: string; resource: string; deleted: boolean } | undefined> {
    const { rows } = await this.run<{ version: string; resource: string; deleted: boolean }>(s, signal, "current", [key]);
    const row = rows[0];
    return row === undefined ? undefined : { version: String(row.version), resource: row.resource, deleted: row.deleted };
  }

  /** Called after the ratchet refused: the error says what it was refused for (inspect.ts). */
  private staleError(s: Session<Client>, fence: CheckedFence): Promise<StaleTokenError> {
    return staleError(s, this.query("highest", [fence.resource]), fence);
  }

  private query(name: NamedStatement, values: PgParam[]): PgQueryConfig {
    return { name: this.names[name], text: this.sql[name], values };
  }
}

/** inTransaction()'s options: whether to commit a result. */
interface TransactionOptions<T> {
  readonly commit?: (result: T) => boolean;
}
