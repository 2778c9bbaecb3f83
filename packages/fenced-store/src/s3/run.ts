import type { AttemptBodies } from "./bodies.js";
import type { SendGate, WriteOutcome } from "./conditional.js";
import { decide, type Decision, type FenceView } from "./decision.js";
import { condition, type FenceSnapshot, type Snapshot, type StoreIo } from "./io.js";
import { build, type Intent, type ManifestState } from "./intent.js";
import { manifestKey, newId } from "./layout.js";
import { encodeManifest, type ManifestHeader } from "./manifest.js";

/**
 * The state of one write while it runs (write.ts), how much of it is known (`next`: the decision on
 * it), and the steps that touch the manifest: its read, an attempt's PUT and what its answer settles.
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

/** A manifest attempt handed to the SDK: its record, its header, its data object, and its outcome once settled. */
export interface Prepared {
  readonly attempt: Attempt;
  readonly header: ManifestHeader;
  readonly dataKey: string | undefined;
  /** Held by a gate until sending() (else handed to the wire by prepare()). */
  readonly gated: boolean;
  readonly outcome: Promise<WriteOutcome>;
}

/** The fence objects as last read or raised. */
interface FenceState {
  /** One per fence of the intent (null: absent); undefined: not read yet. */
  readonly snaps: readonly (FenceSnapshot | null)[] | undefined;
  /**
   * The wait that delivered them (`waits` when it ended); undefined: never current (raised beside
   * another fence's raise, whose CAS loop may have taken several round trips after this one answered).
   */
  readonly readIn: number | undefined;
}

/** Everything one write knows while it runs. Each step reads and updates it; nothing else is shared. */
export interface Run {
  readonly io: StoreIo;
  readonly intent: Intent;
  readonly bodies: AttemptBodies | undefined;
  /** Whether the resource fence objects are read, checked and raised (checkResourceFence). */
  readonly checked: boolean;
  /** The manifest the next attempt is built on and sent against. */
  manifest: ManifestState;
  fences: FenceState;
  /** The waits of this write that have ended, counted (`waited`): freshness as a value. */
  waits: number;
  /** Every attempt sent, in order. */
  readonly attempts: Attempt[];
  /** The key's manifest as read after the latest attempt was sent; undefined while unknown. */
  afterSend: Snapshot | null | undefined;
  /** Throttled answers so far: the pause before the next try doubles with each. */
  throttled: number;
}

/**
 * Awaits `work` as one wait of the write: every wait that lets time pass (a batch of reads, a raise,
 * an upload, a PUT's answer, a pause) ends here, and is counted — but for dataObject's, counted only
 * when it waited for I/O. Fence objects delivered by a wait
 * are current while it is the last one ended (`fencesCurrent`): a wait not counted would let a PUT
 * go out on fences read before it, so the driver awaits nothing else.
 */
export async function waited<T>(run: Run, work: Promise<T>): Promise<T> {
  try {
    return await work;
  } finally {
    run.waits++;
  }
}

/** Read (or raised alone) in the last wait this write ended: nothing was awaited since. */
function fencesCurrent(run: Run): boolean {
  return run.fences.readIn !== undefined && run.fences.readIn === run.waits;
}

/** The write's next step (decision.ts), from what it knows now. */
export function next(run: Run): Decision {
  const fences: FenceView = run.checked ? { checked: true, snaps: run.fences.snaps, current: fencesCurrent(run) } : { checked: false };
  return decide(run.intent, fences, run.manifest);
}

/**
 * THE RULE the fenced write rests on, checked where a manifest PUT is handed to the wire and nowhere
 * else (prepare() ungated, sending() gated): only on a decision to put — with the fence objects
 * checked, one made on a fence read sent after everything the write awaited, whose answer admits it.
 */
function assertMayPut(run: Run): void {
  const decision = next(run);
  if (decision.kind !== "put") throw new Error(`a manifest PUT without a decision to put (${decision.kind})`);
}

/** Reads the key's manifest; an attempt without an answer that it proves never landed is settled. */
export async function readManifest(run: Run): Promise<void> {
  const found = await run.io.readManifest(run.intent.key, run.intent.signal);
  const snap = found?.snap ?? null;
  run.manifest = { snap, inline: found?.inline, read: true };
  for (const attempt of run.attempts) if (attempt.ambiguous && settledBy(attempt, snap)) attempt.ambiguous = false;
}

/**
 * The next manifest attempt, built on the current manifest and handed to the SDK (through `gate`:
 * sent only once it opens). Without a gate it goes to the wire now: an abort seen by then sends nothing.
 */
export function prepare(run: Run, dataKey: string | undefined, gate?: SendGate): Prepared {
  const { io, intent, manifest } = run;
  if (gate === undefined) {
    intent.signal.throwIfAborted();
    assertMayPut(run);
  }
  const writeId = newId();
  const { header, inline } = build(intent, manifest, writeId, dataKey);
  const outcome = io.objects.write(
    manifestKey(io.options.prefix, intent.key),
    encodeManifest(header, inline),
    condition(manifest.snap),
    intent.signal,
    gate,
  );
  return { attempt: { writeId, target: manifest.snap, ambiguous: true }, header, dataKey, gated: gate !== undefined, outcome };
}

/**
 * The attempt goes on the wire: from now on it may land (its answer is a wait of its own). A gated
 * PUT is checked against an abort and the decision here, the last moment it can be stopped (its gate
 * is then never opened); an ungated one was checked by prepare() and is already handed to the SDK,
 * so it is recorded whatever happens now — an attempt that may land is never left out.
 */
export function sending(run: Run, p: Prepared): Prepared {
  if (p.gated) {
    run.intent.signal.throwIfAborted();
    assertMayPut(run);
  }
  run.attempts.push(p.attempt);
  if (p.dataKey !== undefined) run.bodies?.sent(p.dataKey, p.attempt);
  run.afterSend = undefined;
  return p;
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
  if (run.bodies === undefined) return undefined;
  const prepared = await run.bodies.prepare(run.manifest.snap?.header.writeId ?? null);
  // A wait of the write only when it waited for I/O (an upload or a copy): an upload already done
  // settled before, and awaiting it lets no request answer meanwhile (microtasks only).
  if (prepared.waited) run.waits++;
  return prepared.key;
}
