import type { CheckedFence } from "@fenced/fence";
import { fenceParams, type Calls } from "./calls.js";
import type { CheckedPutAll, CheckedPutAllWrite } from "./options.js";
import { foreignKeyRefusal, versionRefusal } from "./refusals.js";
import type { Session } from "./session.js";
import { lockOrder, textArray } from "./sql.js";
import type { PgClient, PgPutResult } from "./types.js";

/**
 * The writes under several fences (PROTOCOL.md, "Several fences in one write"). Every fence's ratchet
 * is raised and checked first, all of them in one statement, their rows locked in lockOrder (sql.ts,
 * `ratchetAll`, says why PostgreSQL locks them in that order); then putAll()'s records, one statement
 * each, in key order. So every call of the store takes its locks in one global order — fence rows by
 * resource, then record rows by key — and no two calls ever wait for each other in a cycle, whatever
 * order their caller gave the fences or the writes in.
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
 * putAll(): BEGIN; every ratchet (raiseAll); each record in key order, as put() would write it under
 * its fence; COMMIT. The first refusal — a stale fence, then, in key order, a key of another
 * resource or a version mismatch — rolls all of it back. Results in the order of the writes given.
 */
export function putAll<Client extends PgClient>(calls: Calls<Client>, checked: CheckedPutAll): Promise<PgPutResult[]> {
  const { writes, fences, signal } = checked;
  return calls.inTransaction({ operation: "putAll" }, signal, async (s) => {
    await raiseAll(calls, s, signal, fences);
    const written = new Map<string, PgPutResult>();
    // Key order: two putAll() calls creating the same new keys wait for each other's inserts in one order only.
    for (const write of [...writes].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)))
      written.set(write.key, await putRecord(calls, s, signal, write));
    return writes.map((w) => written.get(w.key) as PgPutResult);
  });
}

/** One record of putAll(), after the ratchets: the owner and the version are decided by the statement, on the newest row, under its lock. */
async function putRecord<Client extends PgClient>(
  calls: Calls<Client>,
  s: Session<Client>,
  signal: AbortSignal | undefined,
  write: CheckedPutAllWrite,
): Promise<PgPutResult> {
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
