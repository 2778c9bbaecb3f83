import type { AttemptBodies } from "./bodies.js";
import type { SendGate, WriteOutcome } from "./conditional.js";
import { condition, type FenceSnapshot, type Snapshot, type StoreIo } from "./io.js";
import { build, type Intent, type ManifestState } from "./intent.js";
import { manifestKey, newId } from "./layout.js";
import { encodeManifest, type ManifestHeader } from "./manifest.js";

/** The state of one write while it runs (write.ts), and the small steps both fencing strategies share. */

/** One manifest PUT of this write: its writeId, and what it replaces if it lands. */
export interface Attempt {
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

/** The fence objects as last read or raised (null: absent; undefined: not read yet). */
export interface FenceState {
  readonly snaps: readonly (FenceSnapshot | null)[] | undefined;
  /** Read (or raised) after everything this write awaited since: a manifest PUT may go out on it. */
  readonly fresh: boolean;
}

/** How a write treats the resource fence objects: checked and raised (the default), or not at all. */
export interface Fencing {
  /** Whether this store expects a fence object to need raising (a guess: it only decides what step 2 reads). */
  expectsRaise(run: Run): boolean;
  /** Reads the fence objects into run.fences; with a gate, the read goes on the wire only once it opens. */
  read(run: Run, gate?: SendGate): Promise<void>;
  /** The refusal by the fence objects as last read, if any. */
  problem(run: Run): Error | undefined;
  /** Step 4: raises the fence objects below this write's tokens. */
  raise(run: Run): Promise<void>;
  /** Steps 5 to 7: the attempt's data object, then its manifest PUT; undefined if a raise is needed first (nothing was sent). */
  send(run: Run): Promise<Prepared | undefined>;
}

/** Everything one write knows while it runs. Each step reads and updates it; nothing else is shared. */
export interface Run {
  readonly io: StoreIo;
  readonly intent: Intent;
  readonly bodies: AttemptBodies | undefined;
  readonly fencing: Fencing;
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

/** Reads the key's manifest; an attempt without an answer that it proves never landed is settled. */
export async function readManifest(run: Run): Promise<void> {
  const found = await run.io.readManifest(run.intent.key, run.intent.signal);
  const snap = found?.snap ?? null;
  run.manifest = { snap, inline: found?.inline, fresh: true };
  for (const attempt of run.attempts) if (attempt.ambiguous && settledBy(attempt, snap)) attempt.ambiguous = false;
}

/**
 * Reads the fence objects and the manifest, each if asked, in parallel. The fences are fresh after
 * it only if they were read in it: a manifest read awaited alone comes between them and the PUT.
 */
export async function readBatch(run: Run, what: { readonly fences: boolean; readonly manifest: boolean }): Promise<void> {
  await Promise.all([what.fences ? run.fencing.read(run) : undefined, what.manifest ? readManifest(run) : undefined]);
  if (!what.fences && what.manifest) run.fences = { ...run.fences, fresh: false };
}

/**
 * The next manifest attempt, built on the current manifest and handed to the SDK (through `gate`:
 * sent only once it opens). Without a gate it goes to the wire now: an abort seen by then sends nothing.
 */
export function prepare(run: Run, dataKey: string | undefined, gate?: SendGate): Prepared {
  const { io, intent, manifest } = run;
  if (gate === undefined) intent.signal.throwIfAborted();
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
 * The attempt goes on the wire: from now on it may land, and what follows awaits it (the fences are
 * no longer fresh). A gated PUT is checked against an abort here, the last moment it can be stopped
 * (its gate is then never opened); an ungated one was checked by prepare() and is already handed to
 * the SDK, so it is recorded whatever happens now — an attempt that may land is never left out.
 */
export function sending(run: Run, p: Prepared): Prepared {
  if (p.gated) run.intent.signal.throwIfAborted();
  run.attempts.push(p.attempt);
  if (p.dataKey !== undefined) run.bodies?.sent(p.dataKey, p.attempt);
  run.afterSend = undefined;
  run.fences = { ...run.fences, fresh: false };
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
  if (prepared.waited) run.fences = { ...run.fences, fresh: false };
  return prepared.key;
}
