import type { CheckedFence } from "@fenced/fence/internal";
import { fenceParams, type Calls } from "./calls.js";
import type { CheckedPutAll, CheckedPutAllWrite } from "./options.js";
import { foreignKeyRefusal, putAllRefused, versionRefusal } from "./refusals.js";
import type { Session } from "./session.js";
import { lockOrder, textArray } from "./sql.js";
import type { WriteResult } from "../contract.js";
import type { PgClient } from "./types.js";
import type { WriteOrder } from "./write-order.js";

/**
 * The writes under several fences (PROTOCOL.md, "Several fences in one write"). Every fence's ratchet
 * is raised and checked first, all of them in one statement, their rows locked in lockOrder (sql.ts,
 * `ratchetAll`, says why PostgreSQL locks them in that order); then putAll()'s records, one statement
 * each, in key order. So every call of the store takes its locks in one global order — fence rows by
 * resource, then record rows by key — and no two calls ever wait for each other in a cycle, whatever
 * order their caller gave the fences or the writes in. putAll() sends all of it as one statement
 * first (sql.ts, putAllOrdered), which takes the same locks in the same order.
 */

/**
 * Raises and checks every fence, inside the call's transaction, before anything else of it: one
 * fence through the single-fence `ratchet`, several through `ratchetAll`. A refused fence —
 * the first refused in the order given — is its StaleTokenError; the caller then rolls back,
 * and with it every raise the statement made.
 */
export async function raiseAll<Client extends PgClient>(
  calls: Calls<Client>,
  s: Session<Client>,
  signal: AbortSignal | undefined,
  fences: readonly CheckedFence[],
): Promise<void> {
  const [only, ...more] = fences;
  if (only !== undefined && more.length === 0) {
    const { rows } = await calls.run(s, signal, "ratchet", fenceParams(only));
    if (rows.length === 0) throw await calls.staleError(s, only);
    return;
  }
  const sorted = lockOrder(fences);
  const { rows } = await calls.run<{ resource: string }>(s, signal, "ratchetAll", [
    textArray(sorted.map((f) => f.resource)),
    textArray(sorted.map((f) => f.token.toString())),
    textArray(sorted.map((f) => f.holder)),
  ]);
  const admitted = new Set(rows.map((r) => r.resource));
  const refused = fences.find((f) => !admitted.has(f.resource));
  if (refused !== undefined) throw await calls.staleError(s, refused);
}

/**
 * putAll(): first in one statement, `putAllOrdered`, its commit sent with it — every ratchet, then
 * every record in key order, each decided as put() decides it under its fence, the unconditional
 * ones coming after `order` (write-order.ts) so that a late commit cannot overwrite the holder's
 * later write. Refused in any way, that statement writes nothing and does not say for which key: the
 * call then runs as a transaction (inTransaction), whose statements name the refusal — the first in
 * this order: a stale fence (the first in the order given), then the records' in key order — and
 * whose COMMIT leaves only once every answer is in. Results in the order of the writes given.
 */
export function putAll<Client extends PgClient>(calls: Calls<Client>, order: WriteOrder, checked: CheckedPutAll): Promise<WriteResult[]> {
  const { writes, fences, signal } = checked;
  // Key order: two calls creating the same new keys wait for each other's inserts in one order only.
  const byKey = [...writes].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  return calls.session({ operation: "putAll", fences }, signal, async (s) => {
    const written =
      (oneStatementFits(byKey) ? await inOneStatement(calls, s, order, fences, byKey) : undefined) ??
      (await inTransaction(calls, s, signal, fences, byKey));
    for (const result of written.values()) order.saw(result.version);
    return writes.map((w) => written.get(w.key) as WriteResult);
  });
}

/**
 * The most JSON text putAllOrdered carries in its one parameter of values: larger writes go straight
 * to the transaction, one value per statement, as a put would send each. One parameter holding them
 * all could exceed what a JavaScript string holds (RangeError) or PostgreSQL's 1 GB message limit
 * (the server drops the connection: nothing written, but the answer lost), where the transaction's
 * statements would not. A one-statement write saves a round trip, which values this large dwarf.
 */
export const ONE_STATEMENT_JSON_CHARS = 1 << 20;

function oneStatementFits(byKey: readonly CheckedPutAllWrite[]): boolean {
  let chars = 0;
  for (const w of byKey) chars += w.json.length;
  return chars <= ONE_STATEMENT_JSON_CHARS;
}

/** putAllOrdered: the results by key, or undefined when the statement refused (nothing written). */
async function inOneStatement<Client extends PgClient>(
  calls: Calls<Client>,
  s: Session<Client>,
  order: WriteOrder,
  fences: readonly CheckedFence[],
  byKey: readonly CheckedPutAllWrite[],
): Promise<Map<string, WriteResult> | undefined> {
  const sorted = lockOrder(fences);
  let rows: { key: string; version: string }[];
  try {
    ({ rows } = await calls.write<{ key: string; version: string }>(s, "putAllOrdered", [
      textArray(sorted.map((f) => f.resource)),
      textArray(sorted.map((f) => f.token.toString())),
      textArray(sorted.map((f) => f.holder)),
      textArray(byKey.map((w) => w.key)),
      textArray(byKey.map((w) => w.json)),
      textArray(byKey.map((w) => w.fence.resource)),
      textArray(byKey.map((w) => w.ifVersion ?? null)),
      order.after(),
    ]));
  } catch (err) {
    if (putAllRefused(err)) return undefined;
    throw err;
  }
  const tokens = new Map(byKey.map((w) => [w.key, w.fence.token]));
  const written = new Map<string, WriteResult>();
  for (const row of rows) written.set(row.key, { version: String(row.version), token: tokens.get(row.key) as bigint });
  // Every record is written or the statement raises: a missing one is not an answer it gives.
  if (written.size !== byKey.length) throw new Error(`putAll wrote ${written.size} of ${byKey.length} records; written outside the store?`);
  return written;
}

/** BEGIN; every ratchet (raiseAll); each record in key order, one statement each; COMMIT. The first refusal rolls all of it back. */
function inTransaction<Client extends PgClient>(
  calls: Calls<Client>,
  s: Session<Client>,
  signal: AbortSignal | undefined,
  fences: readonly CheckedFence[],
  byKey: readonly CheckedPutAllWrite[],
): Promise<Map<string, WriteResult>> {
  return calls.transaction(s, signal, async () => {
    await raiseAll(calls, s, signal, fences);
    const written = new Map<string, WriteResult>();
    for (const write of byKey) written.set(write.key, await putRecord(calls, s, signal, write));
    return written;
  });
}

/** One record of putAll(), after the ratchets: the owner and the version are decided by the statement, on the newest row, under its lock. */
async function putRecord<Client extends PgClient>(
  calls: Calls<Client>,
  s: Session<Client>,
  signal: AbortSignal | undefined,
  write: CheckedPutAllWrite,
): Promise<WriteResult> {
  const { key, json, fence, ifVersion } = write;
  const params = [...fenceParams(fence), key, json];
  let rows: { version: string }[];
  try {
    ({ rows } =
      ifVersion === undefined
        ? await calls.run<{ version: string }>(s, signal, "putRecord", params)
        : await calls.run<{ version: string }>(s, signal, "putRecordIfVersion", [...params, ifVersion]));
  } catch (err) {
    // The statement raised its refusal: the transaction can only roll back now, and does (inTransaction).
    throw foreignKeyRefusal(err, key, fence.resource) ?? (ifVersion === undefined ? undefined : versionRefusal(err, key, ifVersion)) ?? err;
  }
  const row = rows[0];
  // The upsert either writes its row or raises: no row back is not an answer the statement gives.
  if (row === undefined) throw new Error(`putAll's write of ${JSON.stringify(key)} returned no row; written outside the store?`);
  return { version: String(row.version), token: fence.token };
}
