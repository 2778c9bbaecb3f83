import { InvalidArgumentError } from "@fenced/fence";
import type {
  PutAllOptions,
  PutAllWrite,
  RecordStore,
  SignalOptions,
  StoreCapabilities,
  TransferOptions,
  WriteOptions,
  WriteResult,
} from "../contract.js";
import { type CheckedFence } from "@fenced/fence/internal";
import { ResourceMismatchError, VersionMismatchError } from "../errors.js";
import { foreignKeyRefusal, outOfOrder, versionRefusal } from "./refusals.js";
import { assertKey, assertResource, type Fence, type FenceSet } from "../fence.js";
import { assertJsonValue, type JsonValue } from "../json.js";
import { oneOrMoreFences, refuseAborted, signalOnly, timeoutOption } from "../options.js";
import { putAll, raiseAll } from "./batch.js";
import { Calls, fenceParams, type TransactionOptions } from "./calls.js";
import { assertPool, putAllOptions, transferOptions, writeOptions } from "./options.js";
import { readFence } from "./inspect.js";
import { migrateWithin, verifyWithin } from "./migrate.js";
import type { Call, Session } from "./session.js";
import type { FencedPostgresOptions, PgClient, PgParam, PgPool, PgQueryResult, PgRecord } from "./types.js";
import { lockOrder, quoteSchema, statements } from "./sql.js";
import { firstPut, nextPut, putValues, WriteOrder, type PutAnswer } from "./write-order.js";

/**
 * Fenced writes to PostgreSQL. Every write raises the per-resource ratchet (table `fence`) and
 * writes the record in one transaction, the ratchet first; a write of a key named for its fence's
 * resource, at the fence the resource holds, is one UPDATE of the record checked against its copy of
 * the fence row (own-sql.ts), and anything else there goes on to the ratchet. A token below the highest accepted for
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
export class FencedPostgres<Client extends PgClient = PgClient> implements RecordStore {
  /** register() of several fences is one statement, all or none; ifVersion matches only a live record, never a tombstone. */
  readonly capabilities: StoreCapabilities = Object.freeze({ atomicRegister: true, ifVersionMatchesTombstone: false });
  readonly schema: string;
  /** The deadline of every call, in milliseconds. */
  readonly timeoutMs: number;
  private readonly calls: Calls<Client>;
  /** The newest version the database gave this store: what an unconditional put comes after (write-order.ts). */
  private readonly order = new WriteOrder();

  constructor(pool: PgPool<Client>, options: FencedPostgresOptions = {}) {
    assertPool(pool);
    if (typeof options !== "object" || options === null)
      throw new InvalidArgumentError("options", "must be an object { schema?, timeoutMs? }");
    const schema: unknown = options.schema === undefined ? "fenced" : options.schema;
    const sql = statements(quoteSchema(schema));
    this.schema = schema as string;
    this.timeoutMs = timeoutOption(options.timeoutMs, "options.timeoutMs");
    this.calls = new Calls(pool, this.timeoutMs, sql);
  }

  /**
   * Creates the schema, tables, sequence and function if missing, and upgrades a layout created by
   * an earlier version (holder columns, tombstones). Idempotent; concurrent callers serialise on an
   * advisory lock.
   */
  async migrate(): Promise<void> {
    await this.calls.session({ operation: "migrate" }, undefined, (s) =>
      migrateWithin(s, this.calls.sql, this.schema, (name, values) => this.calls.query(name, values)),
    );
  }

  /**
   * Checks, without changing anything, what migrate() repairs: the tables exist, and the version
   * sequence is ahead of every record's version (PROTOCOL.md, "What the database must provide") and
   * drawn from by new records. StoreSetupError "not-migrated", naming the fix, when one does not
   * hold. For a start without migrate() (a role that does not own the schema); not for a readiness
   * probe: it reads max(version), which scans the records table.
   */
  async verify(options?: SignalOptions): Promise<void> {
    const signal = signalOnly(options);
    refuseAborted(signal);
    await this.calls.session({ operation: "verify" }, signal, (s) =>
      verifyWithin(s, this.schema, (name, values) => this.calls.query(name, values)),
    );
  }

  /**
   * Fence-on-acquire: raises the resource's ratchet to fence.token (and its holder) without writing a
   * record, so that every older holder is refused from now on, even for keys the new holder never writes.
   * Several fences (an array, or a lease of several resources): every ratchet, all or none — one
   * refused is its StaleTokenError and none is raised (one statement in one transaction, batch.ts).
   */
  async register(fence: Fence | FenceSet, options?: SignalOptions): Promise<void> {
    const fences = oneOrMoreFences(fence);
    const signal = signalOnly(options);
    refuseAborted(signal);
    const call = { operation: "register", fences };
    const [only, ...more] = fences;
    if (only === undefined || more.length > 0) {
      await this.calls.inTransaction(call, signal, (s) => raiseAll(this.calls, s, signal, fences));
      return;
    }
    await this.calls.session(call, signal, async (s) => {
      // One statement, its commit sent with it (commit-at.ts, COMMIT_AT).
      const { rows } = await this.calls.write(s, "ratchet", fenceParams(only));
      if (rows.length === 0) throw await this.calls.staleError(s, only);
    });
  }

  /**
   * Writes `value` under `key` if the fence passes its resource's ratchet, the key is unowned or
   * owned by fence.resource (a new key becomes fence.resource's), and, with ifVersion, the record is
   * still at that version. All-or-nothing.
   */
  async put(key: string, value: unknown, options: WriteOptions): Promise<WriteResult> {
    assertKey(key);
    const { fence, ifVersion, signal } = writeOptions(options);
    assertJsonValue(value);
    const json = JSON.stringify(value);
    refuseAborted(signal);
    if (ifVersion === undefined) {
      // The common case in a single statement: see sql.ts for why it is atomic, ordered, and undone whole when refused.
      return this.calls.session({ operation: "put", key, fences: [fence] }, signal, async (s) => {
        let result: PgQueryResult<{ version: string }>;
        try {
          result = await this.unconditional(s, signal, key, fence, json);
        } catch (err) {
          throw foreignKeyRefusal(err, key, fence.resource) ?? err;
        }
        const row = result.rows[0];
        if (row === undefined) throw await this.calls.staleError(s, fence);
        this.order.saw(String(row.version));
        return { version: String(row.version), token: fence.token };
      });
    }
    const values = [...fenceParams(fence), key, json, ifVersion];
    return this.conditional({ operation: "put", key, fences: [fence] }, signal, fence, ifVersion, "putIfVersion", values);
  }

  /**
   * Writes several records in one transaction, all or none, each exactly as put(key, value, { fence,
   * ifVersion }) under the fence of the resource it names (`resource`, which may be left out when
   * there is one fence): an unowned key becomes that resource's, a key of another resource is
   * ResourceMismatchError, an ifVersion that does not hold is VersionMismatchError. options.fences
   * (an array of fences, or a lease of one resource or several) are all raised and checked first,
   * whether or not a write names them: one refused is StaleTokenError. Any refusal writes nothing,
   * no ratchet raise included; with several, the first in this order: a stale fence (the first in
   * the order given), then the records' in key order. Resolves one result per write, in the order
   * given. At most MAX_PUT_ALL (256) writes, no key twice. Sent as one statement with its commit
   * (batch.ts), as put() is: once it is sent, a lost answer is OutcomeUnknownError, and a late commit
   * never overwrites a later write of the same holder. Refused, it is run again as a transaction
   * (deadline, abort and OutcomeUnknownError as transfer()), whose statements name the refusal.
   *
   * Fence rows are locked by resource and records by key, whatever order they are given in, so two
   * calls with overlapping fences or keys never deadlock (PROTOCOL.md, "Several fences in one write").
   */
  async putAll(writes: readonly PutAllWrite[], options: PutAllOptions): Promise<WriteResult[]> {
    const checked = putAllOptions(writes, options);
    refuseAborted(checked.signal);
    return putAll(this.calls, this.order, checked);
  }

  /**
   * The resource's fence as the ratchet holds it: the highest token admitted and the holder that
   * presented it (null: a fence without a holder) — the very row every write's check compares
   * against — or undefined if no write or register() for the resource has committed. A plain read of
   * what is committed: it takes no lock, and a write still in flight shows once it commits.
   */
  async fence(resource: string, options?: SignalOptions): Promise<CheckedFence | undefined> {
    assertResource(resource);
    const signal = signalOnly(options);
    refuseAborted(signal);
    return this.calls.session({ operation: "fence" }, signal, (s) => readFence(s, this.calls.query("highest", [resource]), resource));
  }

  /**
   * The record under `key`, or undefined (never written, or deleted). Reading needs no fence: only
   * writes are ordered. options.signal ends the wait for a connection, as for a write.
   */
  async get<T = JsonValue>(key: string, options?: SignalOptions): Promise<PgRecord<T> | undefined> {
    assertKey(key);
    const signal = signalOnly(options);
    refuseAborted(signal);
    const { rows } = await this.calls.session({ operation: "get", key }, signal, (s) =>
      s.query<{ value: T; version: string; token: string; resource: string; holder: string | null }>(
        this.calls.query("get", [key]),
        "read",
      ),
    );
    const row = rows[0];
    if (row === undefined) return undefined;
    this.order.saw(String(row.version));
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
  async delete(key: string, options: WriteOptions): Promise<WriteResult> {
    assertKey(key);
    const { fence, ifVersion, signal } = writeOptions(options);
    refuseAborted(signal);
    const call = { operation: "delete", key, fences: [fence] };
    if (ifVersion !== undefined)
      return this.conditional(call, signal, fence, ifVersion, "deleteIfVersion", [...fenceParams(fence), key, ifVersion]);
    if (key !== fence.resource) return this.calls.inTransaction(call, signal, (s) => this.tombstone(s, signal, key, fence));
    return this.calls.session(call, signal, async (s) => {
      // The one-row statement first (own-sql.ts), its commit sent with it; nothing written, the transaction.
      const { rows } = await this.calls.write<{ version: string }>(s, "deleteOwn", [...fenceParams(fence), this.order.after()]);
      const row = rows[0];
      if (row !== undefined) {
        this.order.saw(String(row.version));
        return { version: String(row.version), token: fence.token };
      }
      return this.calls.transaction(s, signal, (s) => this.tombstone(s, signal, key, fence));
    });
  }

  /** An unconditional delete's transaction, after BEGIN: the ratchet, then the tombstone (sql.ts, `tombstone`). */
  private async tombstone(s: Session<Client>, signal: AbortSignal | undefined, key: string, fence: CheckedFence): Promise<WriteResult> {
    await raiseAll(this.calls, s, signal, [fence]);
    const { rows } = await this.calls.run<{ version: string }>(s, signal, "tombstone", [...fenceParams(fence), key]);
    const row = rows[0];
    if (row !== undefined) return { version: String(row.version), token: fence.token };
    const now = await this.calls.current(s, signal, key);
    if (now !== undefined && now.resource !== fence.resource) throw new ResourceMismatchError(key, fence.resource, now.resource);
    throw new Error(
      `delete of ${JSON.stringify(key)} wrote no tombstone although the key is ${JSON.stringify(fence.resource)}'s; written outside the store?`,
    );
  }

  /**
   * Moves `key` (a live record or a tombstone) from the resource that owns it to another. Both fences
   * must pass their own resource's ratchet (both are raised, in resource order), the key must be
   * owned by from.resource (else ResourceMismatchError), and with ifVersion the record must be at
   * that version. The record gets a new version, and to's token and holder. All-or-nothing; resolves
   * undefined, writing nothing, if the key was never written.
   */
  async transfer(key: string, options: TransferOptions): Promise<WriteResult | undefined> {
    assertKey(key);
    const { from, to, ifVersion, signal } = transferOptions(options);
    refuseAborted(signal);
    return this.calls.inTransaction(
      { operation: "transfer", key, fences: [from, to] },
      signal,
      async (s) => {
        // Every transfer locks the two fence rows in the one order of every call (lockOrder): no deadlock between them.
        const [first, second] = lockOrder([from, to]) as [CheckedFence, CheckedFence];
        const { rows } = await this.calls.run<{ resource: string }>(s, signal, "ratchetPair", [
          ...fenceParams(first),
          ...fenceParams(second),
        ]);
        for (const fence of [from, to]) if (!rows.some((r) => r.resource === fence.resource)) throw await this.calls.staleError(s, fence);
        const moved = await this.calls.run<{ version: string }>(s, signal, "transferOwner", [
          from.resource,
          ...fenceParams(to),
          key,
          ifVersion ?? null,
        ]);
        const row = moved.rows[0];
        if (row !== undefined) return { version: String(row.version), token: to.token };
        const now = await this.calls.current(s, signal, key);
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
   * Several fences (an array, or a lease of several resources): every one passes its resource's
   * ratchet, all raised in one statement before `work` runs, their rows locked by resource whatever
   * order they are given in (so two transactions over overlapping sets never deadlock on them); one
   * refused (the first in the order given) is its StaleTokenError, and none of `work` runs.
   *
   * The deadline (timeoutMs) covers the whole call: the wait for a client, BEGIN, the ratchet, `work`
   * and COMMIT. Each of `work`'s statements is also bounded on the server by the time left at BEGIN
   * (SET LOCAL statement_timeout). When the deadline passes while `work` runs, the connection is
   * closed under it (its statements fail, the transaction is rolled back) and the call fails with
   * StoreUnavailableError "timeout" at once. An error `work` throws passes through unchanged, unless
   * the connection broke or the deadline passed meanwhile (then StoreUnavailableError, the error as
   * its cause); either way nothing is committed.
   */
  async transaction<T>(fence: Fence | FenceSet, work: (client: Client) => Promise<T>, options?: SignalOptions): Promise<T> {
    const fences = oneOrMoreFences(fence);
    if (typeof work !== "function") throw new InvalidArgumentError("work", "must be a function (client) => Promise");
    const signal = signalOnly(options);
    refuseAborted(signal);
    return this.fenced({ operation: "transaction", fences }, fences, signal, (s) => s.callback(() => work(s.client)));
  }

  /** BEGIN; the ratchets (batch.ts: one fence, or several in lock order); work; COMMIT. The ratchets run first so their row locks order everything after them. */
  private fenced<T>(
    call: Call,
    fences: readonly CheckedFence[],
    signal: AbortSignal | undefined,
    work: (s: Session<Client>) => Promise<T>,
    options?: TransactionOptions<T>,
  ): Promise<T> {
    return this.calls.inTransaction(
      call,
      signal,
      async (s) => {
        await raiseAll(this.calls, s, signal, fences);
        return work(s);
      },
      options,
    );
  }

  /**
   * An unconditional put in one statement, sent as nextPut (write-order.ts) decides: first at the
   * fence the row holds (`putOrderedShared`), its commit sent with it, after the newest version the
   * database gave this store, so that it cannot land late over a later write of the holder; then the
   * raise (`putOrdered`) or, refused as out of order, `putShared`, whose commit leaves only once its
   * answer is in (commit-at.ts). At most three statements. Resolves the answer that ended it (no row:
   * the fence is stale).
   */
  private async unconditional(
    s: Session<Client>,
    signal: AbortSignal | undefined,
    key: string,
    fence: CheckedFence,
    json: string,
  ): Promise<PgQueryResult<{ version: string }>> {
    const values = [...fenceParams(fence), key, json];
    // Drawn once, before the first statement is issued: every statement of this put comes after it.
    const after = this.order.after();
    for (let statement = firstPut(key, fence.resource); ;) {
      let result: PgQueryResult<{ version: string }> | undefined;
      let failure: unknown;
      let answer: PutAnswer;
      try {
        result = await this.calls.write<{ version: string }>(s, statement, putValues(statement, values, after));
        answer = result.rows.length > 0 ? "row" : "no-row";
      } catch (err) {
        failure = err;
        answer = outOfOrder(err) ? "out-of-order" : "error";
      }
      const next = nextPut(statement, answer);
      if (next === "throw") throw failure;
      if (next === "written" || next === "stale") return result as PgQueryResult<{ version: string }>;
      // An abort is honoured between two statements, never inside one.
      refuseAborted(signal);
      statement = next;
    }
  }

  /**
   * Ratchet and conditional write in one statement, its commit sent with it (commit-at.ts, COMMIT_AT).
   * Refused in any way, the statement writes nothing and leaves the ratchet as it was (sql.ts, putIfVersion, says
   * why that holds against concurrent writers). Zero rows back: the fence is stale; a refusal for the
   * owner or the version is an error raised by the statement itself, recognised by its SQLSTATE.
   */
  private conditional(
    call: Call & { readonly key: string },
    signal: AbortSignal | undefined,
    fence: CheckedFence,
    expected: string,
    name: "putIfVersion" | "deleteIfVersion",
    values: PgParam[],
  ): Promise<WriteResult> {
    const { key } = call;
    return this.calls.session(call, signal, async (s) => {
      let result: PgQueryResult<{ version: string }>;
      try {
        result = await this.calls.fencedWrite<{ version: string }>(s, signal, name, values, key === fence.resource);
      } catch (err) {
        throw foreignKeyRefusal(err, key, fence.resource) ?? versionRefusal(err, key, expected) ?? err;
      }
      const row = result.rows[0];
      if (row === undefined) throw await this.calls.staleError(s, fence);
      this.order.saw(String(row.version));
      return { version: String(row.version), token: fence.token };
    });
  }
}
