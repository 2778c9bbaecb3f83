import type { WriteOutcome } from "../conditional/port.js";
import { decide, type Decision, type FenceView } from "./decision.js";
import type { Bodies, FenceSnapshot, Snapshot, StoreIo } from "./io.js";
import type { Intent, ManifestState } from "./intent.js";
import type { ManifestHeader } from "./manifest.js";

/**
 * The state of one write while it runs (write.ts), how much of it is known (`next`: the decision on
 * it), what makes a fence read current (`Stamp`), and the manifest's read and what it settles.
 */

/** One manifest PUT of this write: its writeId, and what it replaces if it lands. */
interface Attempt {
  readonly writeId: string;
  /** The manifest it was sent against (null: a create), i.e. the one it replaces if it lands. */
  readonly target: Snapshot | null;
  /**
   * Whether it may have landed, or land while its target is current: from the moment it is handed
   * to the wire until an answer says otherwise (a success, a 412, a 409, a refusal before it applied),
   * or a manifest read shows its target directly replaced by another write (settledBy).
   */
  ambiguous: boolean;
}

/** A manifest attempt handed to the SDK: its record, its header, and its outcome once settled. */
export interface Sent {
  readonly attempt: Attempt;
  readonly header: ManifestHeader;
  readonly outcome: Promise<WriteOutcome>;
}

/**
 * What a fence read (or a raise of the one fence) was delivered after: what the write awaits before
 * a manifest PUT, as it stood then. The read is current — a PUT may go out on it — while both still
 * stand: the manifest was not read since (nor, so, an attempt answered: every attempt that did not
 * land is followed by a manifest read) and the write did not wait for its data object since.
 */
interface Stamp {
  /** The manifest as the write knew it (each read of it makes a new one: compared by identity). */
  readonly manifest: ManifestState;
  /** The data object in place for the next attempt (io.ts, Bodies: `inPlace`); undefined: none was. */
  readonly body: string | undefined;
}

/** The fence objects as last read or raised. */
interface FenceState {
  /** One per fence of the intent (null: absent); undefined: not read yet. */
  readonly snaps: readonly (FenceSnapshot | null)[] | undefined;
  /**
   * What they were delivered after; undefined: never current (raised beside another fence's raise,
   * whose CAS loop may have taken several round trips after this one answered).
   */
  readonly stamp: Stamp | undefined;
}

/** Everything one write knows while it runs. Each step reads and updates it; nothing else is shared. */
export interface Run {
  readonly io: StoreIo;
  readonly intent: Intent;
  readonly bodies: Bodies | undefined;
  /** Whether the resource fence objects are read, checked and raised (checkResourceFence). */
  readonly checked: boolean;
  /** The manifest the next attempt is built on and sent against. */
  manifest: ManifestState;
  fences: FenceState;
  /** Every attempt sent, in order. */
  readonly attempts: Attempt[];
  /** The key's manifest as read after the latest attempt was sent; undefined while unknown. */
  afterSend: Snapshot | null | undefined;
  /** Throttled answers so far: the pause before the next try doubles with each. */
  throttled: number;
}

/** Where the write stands now: a fence read delivered now is stamped with it. */
function stamp(run: Run): Stamp {
  return { manifest: run.manifest, body: run.bodies?.inPlace(run.manifest.snap?.header.writeId ?? null) };
}

/** Records fence objects just read (or raised, `alone`: the intent's one fence), stamped with where the write stands. */
export function fencesDelivered(run: Run, snaps: readonly (FenceSnapshot | null)[], alone = true): void {
  run.fences = { snaps, stamp: alone ? stamp(run) : undefined };
}

/**
 * Whether a manifest PUT may go out on the fence objects as last read: the write has awaited
 * nothing since — no manifest read, no wait for its data object (the one in place then is the one
 * the next attempt names). The one check of freshness: decide() takes it as `current`.
 * It holds only because every await on the way from a fence read to the PUT either changes the
 * stamp (a manifest read, a wait for a data object) or comes before a fence read (the pause before
 * a retry: memory-retry-order.test.ts pins that order). An await of any other kind added on that
 * path (a backoff) must do one of the two, or a stale read would count as current. Below the SDK,
 * the PUT waits for nothing of the SDK's (no rate limiter, no retry) nor for a connection of the
 * client's pool: sent-once.ts, own-sockets.ts.
 */
function fencesCurrent(run: Run): boolean {
  const then = run.fences.stamp;
  const now = stamp(run);
  const bodyInPlace = run.bodies === undefined || (then?.body !== undefined && then.body === now.body);
  return then !== undefined && then.manifest === now.manifest && bodyInPlace;
}

/** The write's next step (decision.ts), from what it knows now. */
export function next(run: Run): Decision {
  const fences: FenceView = run.checked ? { checked: true, snaps: run.fences.snaps, current: fencesCurrent(run) } : { checked: false };
  return decide(run.intent, fences, run.manifest);
}

/** Reads the key's manifest; an attempt without an answer that it proves never landed is settled. */
export async function readManifest(run: Run): Promise<void> {
  const found = await run.io.readManifest(run.intent.key, run.intent.signal);
  const snap = found?.snap ?? null;
  run.manifest = { snap, inline: found?.inline, read: true };
  for (const attempt of run.attempts) if (attempt.ambiguous && settledBy(attempt, snap)) attempt.ambiguous = false;
}

/**
 * Whether a manifest PUT of this write may have been applied without its answer being known: one is
 * in flight, or one got no answer (even if the manifest read since shows another: it may have
 * landed and been replaced). A failure then is never reported as "nothing was applied" — not even a
 * refusal by the manifest or a fence object as they are now (failures.ts, typedFailure).
 */
export function outcomeOpen(run: Run): boolean {
  return run.attempts.some((a) => a.ambiguous);
}

/**
 * Whether `now`, read after `attempt` was sent, proves that the attempt did not land and never will:
 * `now` is not ours and directly replaced the attempt's target (its seq is the next one, and every
 * write of a key's manifest takes its target's seq plus one), so the one slot the attempt could have
 * filled is taken. The target does not come back (ETags never repeat; manifests are never deleted),
 * so the attempt's condition cannot hold again. Anything further along says nothing: the attempt may
 * have landed and been replaced since.
 */
function settledBy(attempt: Attempt, now: Snapshot | null): boolean {
  return now !== null && now.header.writeId !== attempt.writeId && now.header.seq === (attempt.target?.header.seq ?? 0) + 1;
}

/** Step 5: this attempt's data object, named for the manifest it is sent against (undefined: no body object). */
export async function dataObject(run: Run): Promise<string | undefined> {
  return run.bodies?.prepare(run.manifest.snap?.header.writeId ?? null);
}
