/**
 * The SQL of a record's write once its fence is admitted: the record upserts every write ends in, and
 * putAll() in one statement. sql.ts puts them together with the ratchets into the store's statements.
 */
import type { ObjectNames } from "./schema-sql.js";

/**
 * What every record write at an admitted fence sets on the row it lands on: the value, a new version
 * drawn under the row lock, the fence that wrote it, and the fence copy (schema-sql.ts,
 * COPY_TRIGGERS) — the write's fence when the key is its resource, else null. The fence row is locked
 * at exactly that fence until the write commits (raised, or FOR SHARE: fence-lock.ts), so the copy
 * written is the fence row as it commits.
 */
export function setWrite({ versions }: ObjectNames): string {
  return `value = EXCLUDED.value, version = nextval('${versions}'), token = EXCLUDED.token, holder = EXCLUDED.holder,
  fence_token = EXCLUDED.fence_token, fence_holder = EXCLUDED.fence_holder`;
}

/** The copy a record written at fence ($1, `token`, $3) under key $4 carries: the fence when the key is its resource, else null. */
export function copyOf(token: string): string {
  return `CASE WHEN $4 = $1 THEN ${token} END, CASE WHEN $4 = $1 THEN $3::text END`;
}

export type ConditionalUpsert = (rows: string, value: string, expected: string) => string;
export type RecordUpsert = (rows: string, after: string) => string;

/** The record upserts a write ends in, its row from the ratchet CTE (`rows`: "ratchet") or from the parameters. */
export function recordUpserts(names: ObjectNames): { conditionalUpsert: ConditionalUpsert; recordUpsert: RecordUpsert } {
  const { records, refuse, refuseConditional } = names;
  const set = setWrite(names);

  // A conditional write (ifVersion) is one statement in an implicit transaction, like the unconditional put, and
  // shaped like it: the ratchet CTE, then an upsert of the record that reads its row FROM the ratchet
  // (nothing when the ratchet refused: zero rows back, the fence is stale). Any other refusal raises
  // inside the statement, so the implicit transaction aborts and the ratchet raise is undone — what
  // a ROLLBACK did when this ran between BEGIN and COMMIT, without their two round trips:
  // - the key exists: ON CONFLICT finds its newest committed row whatever the statement's snapshot
  //   (waiting for an uncommitted one to commit or roll back), locks it, and only then evaluates the
  //   WHERE on that locked version. Version, owner and liveness are compared there, so a write lands
  //   only on the record exactly as the caller read it; otherwise the CASE calls
  //   refuse_conditional_write, which raises (the owner first, then the version, read under the lock);
  // - the key does not exist: the insert path writes a placeholder whose version is 0 — a value the
  //   sequence never hands out, and $v never is (versions start at 1) — and RETURNING turns that row
  //   into the same refusal before the statement can end. Nothing is ever committed with version 0.
  // Why this is atomic with respect to concurrent writers, although every part of the statement
  // shares one snapshot taken before any wait: the decision never reads the snapshot. The ratchet's
  // ON CONFLICT compares against the newest committed fence row and keeps it locked until the
  // statement ends (the shared form: fence-lock.ts, the row FOR SHARE at exactly this fence), so no
  // raise of the resource interleaves with the write; the record's ON CONFLICT
  // compares against the newest committed record, under its row lock. A writer that waited for the
  // fence row therefore meets what the one before it committed: a higher token leaves it stale, a
  // new version leaves it a version mismatch, its own ratchet raise undone. Of several conditional
  // writes expecting one version exactly one lands (test: "conditional writes racing for one version").
  // `rows`: where the record's row comes from — the ratchet CTE (a single-statement write), or the
  // parameters (a write of putAll(), whose ratchets ran before it in its transaction).
  const conditionalUpsert = (
    rows: string,
    value: string,
    expected: string,
  ): string => `INSERT INTO ${records} AS r (key, value, version, token, resource, holder, fence_token, fence_holder)
${rows === "ratchet" ? `SELECT $4, ${value}, 0, ratchet.token, $1, $3, ${copyOf("ratchet.token")} FROM ratchet` : `VALUES ($4, ${value}, 0, $2::bigint, $1, $3, ${copyOf("$2::bigint")})`}
ON CONFLICT (key) DO UPDATE
SET ${set}
WHERE CASE WHEN r.resource = $1 AND r.version = ${expected}::bigint AND r.value IS NOT NULL THEN true ELSE ${refuseConditional}($4, $1) IS NULL END
RETURNING CASE WHEN r.version = 0 THEN ${refuseConditional}($4, $1) ELSE r.version END AS version`;
  // The unconditional record upsert (putOrdered in sql.ts says why it is safe), its row from the ratchet CTE or the parameters.
  // `after` (putOrdered, write-order.ts): a version drawn from the sequence before this write was
  // issued, or NULL (no such check). A record at exactly this fence — same token, same holder — with
  // a newer version may have been written after this write was issued: it is refused as a version
  // mismatch (refuse_conditional_write, the owner being ours), so that a late
  // write never overwrites the same holder's later one. Compared under the record's row lock, on
  // its newest committed version, like the owner. An update draws its new version there too, under
  // the row lock (the insert's DEFAULT, drawn before any wait and then thrown away on a conflict,
  // serves only a key with no row): so a key's versions increase in the order its writes commit,
  // which the check relies on (a write stalled between drawing a version and locking the row would
  // otherwise commit an older version over a newer one).
  const recordUpsert = (
    rows: string,
    after: string,
  ): string => `INSERT INTO ${records} AS r (key, value, token, resource, holder, fence_token, fence_holder)
${rows === "ratchet" ? `SELECT $4, $5::jsonb, ratchet.token, $1, $3, ${copyOf("ratchet.token")} FROM ratchet` : `VALUES ($4, $5::jsonb, $2::bigint, $1, $3, ${copyOf("$2::bigint")})`}
ON CONFLICT (key) DO UPDATE
SET ${set}
WHERE CASE
  WHEN r.resource <> EXCLUDED.resource THEN ${refuse}($4, $1) IS NULL
  WHEN r.token = EXCLUDED.token AND r.holder IS NOT DISTINCT FROM EXCLUDED.holder AND r.version > ${after} THEN ${refuseConditional}($4, $1) IS NULL
  ELSE true
END
RETURNING r.version`;

  return { conditionalUpsert, recordUpsert };
}

/**
 * putAll() in one statement, as the single-statement writes are: the raises of `ratchetAll` as a CTE,
 * then every record, each decided exactly as putRecord or putRecordIfVersion decides it, with
 * putOrdered's check for the unconditional ones (recordUpsert says why it keeps a late commit off
 * the holder's later write). Why the locks are still taken in the one global order:
 * - the WHERE is a one-time filter (an uncorrelated subquery: an InitPlan) that reads the whole
 *   ratchet CTE before the join yields its first row: every fence lock and fence row is taken, in
 *   ratchetAll's order, before any record row;
 * - the records leave the sorted subplan in $4's order (ORDER BY w.n: the caller sorts the keys),
 *   and the INSERT finishes each — insert, or wait for and lock the conflicting row, then its
 *   WHERE — before it asks for the next (ratchetAll's argument, for records).
 * All or nothing: a stale fence leaves the filter calling refuse_stale_fence, and every other refusal
 * raises from the record's WHERE or RETURNING; either way the implicit transaction aborts and
 * takes every raise and record with it. A record's token and holder come FROM its fence's
 * ratchet row, the one just admitted.
 * Its CTE: `raiseAll`, ratchetAll without its RETURNING (sql.ts).
 */
export function putAllOrdered(names: ObjectNames, raiseAll: string): string {
  const { records, versions, refuse, refuseConditional, refuseStale } = names;
  // putAllOrdered's record upsert: recordUpsert's and conditionalUpsert's decisions, row by row. A
  // conditional record is told apart by the placeholder version 0 of its insert (conditionalUpsert
  // says why nothing is ever committed with it); the version it expects is its entry in $7.
  const expected = "($7::bigint[])[array_position($4::text[], EXCLUDED.key)]";
  return `WITH ratchet AS (${raiseAll}
RETURNING f.resource, f.token, f.holder)
INSERT INTO ${records} AS r (key, value, version, token, resource, holder, fence_token, fence_holder)
SELECT w.key, w.value::jsonb, CASE WHEN w.expected IS NULL THEN nextval('${versions}') ELSE 0 END, ratchet.token, w.resource, ratchet.holder,
  CASE WHEN w.key = w.resource THEN ratchet.token END, CASE WHEN w.key = w.resource THEN ratchet.holder END
FROM unnest($4::text[], $5::text[], $6::text[], $7::bigint[]) WITH ORDINALITY AS w(key, value, resource, expected, n)
JOIN ratchet ON ratchet.resource = w.resource
WHERE (SELECT CASE WHEN count(*) = cardinality($1::text[]) THEN true ELSE ${refuseStale}() END FROM ratchet)
ORDER BY w.n
ON CONFLICT (key) DO UPDATE
SET ${setWrite(names)}
WHERE CASE
  WHEN r.resource <> EXCLUDED.resource THEN ${refuse}(EXCLUDED.key, EXCLUDED.resource) IS NULL
  WHEN EXCLUDED.version = 0 THEN CASE
    WHEN r.version = ${expected} AND r.value IS NOT NULL THEN true
    ELSE ${refuseConditional}(EXCLUDED.key, EXCLUDED.resource) IS NULL
  END
  WHEN r.token = EXCLUDED.token AND r.holder IS NOT DISTINCT FROM EXCLUDED.holder AND r.version > $8::bigint
    THEN ${refuseConditional}(EXCLUDED.key, EXCLUDED.resource) IS NULL
  ELSE true
END
RETURNING r.key, CASE WHEN r.version = 0 THEN ${refuseConditional}(r.key, r.resource) ELSE r.version END AS version`;
}
