/**
 * The fence lock: one transaction-level advisory lock per resource, which every statement of the
 * store that locks a resource's fence row takes first (PROTOCOL.md, "One lease's writes side by
 * side"). Its purpose is to let the writes of one lease run side by side without letting them starve
 * a newer lease.
 *
 * - **Shared** by a single-statement write at exactly the fence the row already holds (sharedRatchet
 *   below). Such a write needs only to keep a newer token out until it commits; it does not rewrite
 *   the row. Many can hold it at once, so writes of one lease to different keys do not wait for each
 *   other (writes of one key still do, on the record's row lock).
 * - **Exclusive** by every other statement that locks fence rows: a raise (the ratchet), and every
 *   ratchet of a transaction (transaction(), putAll(), transfer(), delete(), register() of several).
 *
 * Invariants, each relied on by an argument in PROTOCOL.md:
 * 1. Taken before the fence row is locked, in the same statement: an exclusive holder never waits for
 *    a row that a shared holder of its own key locked, nor the other way round.
 * 2. Never upgraded: a shared write that finds the row at another fence writes nothing and ends; the
 *    store then sends the exclusive statement, in a new transaction (Calls.fencedWrite; nextPut for a put).
 * 3. Several at once (the ratchets of one transaction) are taken all before any row, in the order of
 *    their keys: two calls never wait for each other's advisory locks in a cycle, even when two
 *    resources' keys collide (a collision only makes their writers wait for each other).
 * 4. Fair: PostgreSQL's lock manager queues a new shared request behind a waiting exclusive one, so
 *    a stream of one lease's writes cannot keep a newer lease's raise waiting forever (row locks give
 *    no such promise: a new share joins the holders while an updater waits).
 *
 * The key: hashtextextended('<schema>.' || resource, seed), a 64-bit hash in the one-key (bigint)
 * advisory space. The schema keeps two stores of one database apart (a schema name has no '.', so
 * the text is one pair's only); the seed keeps it apart from migrate()'s own advisory lock.
 *
 * Cost to the database: FOR SHARE by several writers at once makes the row's lockers a MultiXact,
 * so one lease's concurrent writes consume MultiXact ids and member space (measured: 32 writers, about
 * one id and 16 members per write), which autovacuum freezes as it does transaction ids (PROTOCOL.md,
 * "What the database must provide").
 */
const SEED = 1717920867;

/** The fence lock's SQL, for the store in `schema` (a quoted identifier, as quoteSchema returns it). */
export function fenceLocks(schema: string) {
  // quoteSchema's names are [a-z_][a-z0-9_]*, double-quoted: the name itself is a safe SQL literal.
  const name = schema.slice(1, -1);
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`fenceLocks: ${schema} is not a quoted schema name`);
  const key = (resource: string): string => `hashtextextended('${name}.' || ${resource}, ${SEED})`;
  return {
    key,

    /**
     * A condition that takes the exclusive fence lock of resource `$n` and is true: for a one-time filter
     * (WHERE of a SELECT without FROM), which PostgreSQL evaluates before the SELECT yields its row — so
     * before the INSERT it feeds locks anything.
     */
    lockExclusive: (resource: string): string => `pg_advisory_xact_lock(${key(resource)})::text = ''`,

    /**
     * A condition that takes the exclusive fence lock of every resource of a text array, in key order,
     * and is true: an uncorrelated subquery, so PostgreSQL runs it once (an InitPlan) before the query
     * it filters yields any row. OFFSET 0 keeps the ordered subquery a node of its own, so the locks are
     * taken in its output order.
     */
    lockAllExclusive: (resources: string): string =>
      `(SELECT count(pg_advisory_xact_lock(l.k)::text) FROM (SELECT DISTINCT ${key("r")} AS k FROM unnest(${resources}) AS r ORDER BY k OFFSET 0) AS l) IS NOT NULL`,

    /**
     * The ratchet of a write at the fence the row already holds: the shared fence lock, then the fence
     * row locked FOR SHARE if — and only if — it holds exactly this token and holder. One row { token }:
     * admitted, and no raise can commit until this transaction ends (the lock and the row share lock
     * both keep it out). No row: the row holds another fence, or none; nothing is locked but the lock.
     *
     * Why the row as it is now, not as the statement's snapshot shows it: the lock is taken in an
     * InitPlan (the index condition needs its value) after the snapshot, so a raise may have committed
     * while it waited. FOR SHARE locks the newest committed version of the row: when the version the
     * snapshot shows has been updated since, PostgreSQL re-reads the newest one and evaluates the WHERE
     * on it again (READ COMMITTED's EvalPlanQual), so a raise that committed meanwhile leaves no row.
     */
    sharedRatchet: (fence: string): string => `SELECT f.token FROM ${fence} AS f
WHERE f.resource = (SELECT $1::text WHERE pg_advisory_xact_lock_shared(${key("$1")})::text = '')
  AND f.token = $2::bigint AND f.holder IS NOT DISTINCT FROM $3
FOR SHARE OF f`,
  };
}
