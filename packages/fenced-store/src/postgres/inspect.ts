import type { CheckedFence } from "@fenced/fence/internal";
import { StaleTokenError } from "../errors.js";
import type { Session } from "./session.js";
import type { PgClient, PgQueryConfig } from "./types.js";

/**
 * A resource's fence row as the ratchet stores it: the highest token admitted for the resource and the
 * holder that presented it (null: a fence without a holder), or undefined when no write or register()
 * has ever been committed for it. `highest` is sql.ts's `highest` statement for that resource: the
 * row the ratchet's WHERE compares every incoming fence against, read as committed at the time of the
 * read (a plain SELECT takes no row lock, so it neither waits for a writer holding the row nor delays one).
 *
 * Read by FencedPostgres.fence() on its own, and by staleError() below inside a refused write's
 * transaction.
 */
export async function readFence<Client extends PgClient>(
  s: Session<Client>,
  highest: PgQueryConfig,
  resource: string,
): Promise<CheckedFence | undefined> {
  // A read: nothing is written whatever becomes of it, so a failure is a `read`'s (failures.ts).
  const { rows } = await s.query<{ token: string; holder: string | null }>(highest, "read");
  const row = rows[0];
  if (row === undefined) return undefined;
  // pg returns int8 as a decimal string; BigInt keeps all 64 bits.
  return { resource, token: BigInt(row.token), holder: row.holder ?? null };
}

/**
 * The error for a fence the ratchet refused, read after the refusal (in the refused write's
 * transaction): a token above the fence's, or its token from another holder, was committed; tokens
 * never go down, so the fresh read shows one or the other.
 */
export async function staleError<Client extends PgClient>(
  s: Session<Client>,
  highest: PgQueryConfig,
  fence: CheckedFence,
): Promise<StaleTokenError> {
  // The write's answer (zero rows) came back: it was not applied, so a failure of this read is a `read`'s.
  const stored = await readFence(s, highest, fence.resource);
  if (stored === undefined)
    throw new Error(`the ratchet refused token ${fence.token} for ${JSON.stringify(fence.resource)} but no fence row exists`);
  return new StaleTokenError(fence.resource, fence.token, stored.token, stored.holder);
}
