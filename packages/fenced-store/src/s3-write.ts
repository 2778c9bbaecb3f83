import type { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { ContentionError, ResourceMismatchError, StaleTokenError, VersionMismatchError } from "./errors.js";
import { admits, type CheckedFence } from "./fence.js";
import { AttemptBodies } from "./s3-bodies.js";
import { SendGate, type WriteOutcome } from "./s3-conditional.js";
import { condition, fenceRefusal, needsRaise, refusedOwnEtag, throttledPause, type FenceSnapshot, type Snapshot, type StoreIo } from "./s3-io.js";
import { manifestKey, newId } from "./s3-layout.js";
import { encodeManifest, entryFor, nextHeader, transferHeader, type ManifestHeader } from "./s3-manifest.js";

export type Content =
  | { readonly kind: "inline"; readonly bytes: Buffer }
  | { readonly kind: "object"; readonly payload: Buffer | Readable; readonly length: number | undefined }
  | { readonly kind: "tombstone" }
  /** transfer: the body of the manifest replaced, carried over unchanged. */
  | { readonly kind: "carry" };

/** One fenced write of a key's manifest: put, delete (tombstone), update's write, or transfer. */
export interface Intent {
  readonly key: string;
  /** The resource the key must belong to, if it exists. */
  readonly owner: string;
  /** Each must be admitted by its resource's entry in the manifest and by its resource's fence object; both are raised to it. */
  readonly fences: readonly CheckedFence[];
  /** The fence whose resource owns the key after the write, and whose token and holder the new version records. */
  readonly writer: CheckedFence;
  /** undefined: any version; null: the key must be absent; "exists": any version, but the key must exist. */
  readonly ifVersion: string | null | undefined | { readonly exists: true };
  readonly content: Content;
  readonly contentType: string | undefined;
  readonly signal: AbortSignal | undefined;
}

export interface S3PutResult {
  /** Opaque; pass it back as ifVersion. Unique per write, tombstones and transfers included; never reused. */
  readonly version: string;
  /** The token the write was accepted under. */
  readonly token: bigint;
}

/** A manifest known to be current (or absent), with its inline body when it was read just now. */
interface State {
  readonly snap: Snapshot | null;
  readonly inline: Buffer | undefined;
  /** Read during this write (not remembered from an earlier one, nor assumed absent). */
  readonly fresh: boolean;
}

/** A manifest attempt handed to the SDK: its record, its header, its data object, and its outcome once settled. */
interface Prepared {
  readonly attempt: Attempt;
  readonly header: ManifestHeader;
  readonly dataKey: string | undefined;
  readonly outcome: Promise<WriteOutcome>;
}

/** How long a request prepared (signed) ahead may wait to be sent: far below the 15 minutes S3 allows for its date. */
const PREPARED_FOR_MS = 60_000;

/** Resolves after the current turn of the event loop: what was handed to the socket meanwhile has been written. */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

interface Attempt {
  readonly writeId: string;
  /** The manifest it was sent against (null: a create), i.e. the one it replaces if it lands. */
  readonly target: Snapshot | null;
  /** Whether its answer left the outcome open: it may have landed, or land while its target is current. */
  ambiguous: boolean;
}

/**
 * Why the manifest refuses this write, if it does: the key's owner first, then each fence against
 * its resource's entry, then the caller's version.
 */
export function refusal(intent: Pick<Intent, "key" | "owner" | "fences" | "ifVersion">, snap: Snapshot | null): Error | undefined {
  const header = snap?.header;
  if (header !== undefined && header.owner !== intent.owner) return new ResourceMismatchError(intent.key, intent.owner, header.owner);
  for (const fence of intent.fences) {
    const highest = entryFor(header, fence.resource);
    if (highest !== undefined && !admits(highest, fence)) return new StaleTokenError(fence.resource, fence.token, highest.token, highest.holder);
  }
  const { ifVersion } = intent;
  if (ifVersion === undefined) return undefined;
  if (ifVersion !== null && typeof ifVersion === "object") return snap === null ? new VersionMismatchError(intent.key, "(an existing version)", undefined) : undefined;
  const actual = header?.writeId;
  if (ifVersion === null ? snap === null : actual === ifVersion) return undefined;
  const visible = header !== undefined && header.body.kind !== "tombstone" ? actual : undefined;
  return new VersionMismatchError(intent.key, ifVersion ?? "(absent)", visible);
}

/**
 * Runs one fenced write to its end. The manifest CAS is the single request that decides; everything
 * before it only avoids sending a write that is bound to be refused. The steps are numbered as in
 * PROTOCOL.md, "S3", "The write" (step 1, validation, is the caller's).
 */
export async function writeManifest(io: StoreIo, intent: Intent): Promise<S3PutResult> {
  const { key, signal, content } = intent;
  const checkFences = io.options.checkResourceFence;
  const bodies = content.kind === "object" ? new AttemptBodies(io, key, content.payload, content.length, intent.contentType, signal) : undefined;
  const attempts: Attempt[] = [];
  /** The key's manifest as read after the latest attempt was sent; undefined while unknown. */
  let afterSend: Snapshot | null | undefined;
  const readFences = (gate?: SendGate): Promise<(FenceSnapshot | null)[]> => Promise.all(intent.fences.map((f) => io.readFence(f.resource, signal, gate)));
  const readManifest = async (): Promise<State> => {
    const found = await io.readManifest(key, signal);
    return { snap: found?.snap ?? null, inline: found?.inline, fresh: true };
  };
  const refuse = (err: Error, now: Snapshot | null): Error =>
    // A refusal says nothing was written: not so while an attempt whose outcome is open may still land.
    attempts.some((a) => a.ambiguous && (a.target?.etag ?? null) === (now?.etag ?? null)) ? outcomeUnknown(intent, err) : err;

  try {
    // 2. Read the resource fences and, when the write needs it, the manifest. A key this store has not
    // seen is assumed absent: the write goes out as a create, which fails if the key exists (never
    // wrongly succeeds). A fence raise needs the manifest read first (a write refused for its key's
    // owner must raise nothing): when this store expects one, the manifest is read alongside.
    const remembered = io.recall(key);
    const stream = content.kind === "object" && !Buffer.isBuffer(content.payload);
    const versioned = typeof intent.ifVersion === "string" || content.kind === "carry";
    const expectsRaise = checkFences && intent.fences.some((f) => io.expectsRaise(f));
    const readFirst = content.kind === "carry" || expectsRaise || (remembered === undefined ? versioned || stream : remembered.readFirst);
    const guess: State = { snap: remembered?.snap ?? null, inline: undefined, fresh: false };
    // Bytes in memory start uploading now, named for the manifest this store expects to replace. The
    // fences are read now only when they must be known before anything else is sent: for a raise
    // (which needs the manifest too), before a stream (a stale writer never sends it), or alongside a
    // manifest read the write waits for anyway. Otherwise they are read in step 6, right before the
    // manifest PUT, which is prepared meanwhile (after the upload, for bytes too large to inline).
    const uploading = bodies !== undefined && !stream && !(remembered === undefined && versioned);
    if (uploading) bodies.begin(guess.snap?.header.writeId ?? null);
    const readFencesNow = checkFences && (expectsRaise || stream || (readFirst && !uploading));
    /** The fence objects as last read or raised (null: absent); undefined until read. */
    let fences: (FenceSnapshot | null)[] | undefined;
    let state: State;
    [fences, state] = await Promise.all([readFencesNow ? readFences() : undefined, readFirst ? readManifest() : Promise.resolve(guess)]);
    let fenceFresh = readFencesNow;

    // 3. Check. Only the current manifest may refuse a write: a refusal by a remembered one is re-read,
    // with the fences if they were not read yet (a stale token is reported before what the manifest says).
    const fenceProblem = (): StaleTokenError | undefined => intent.fences.map((f, i) => (fences === undefined ? undefined : fenceRefusal(f, fences[i] ?? null))).find((e) => e !== undefined);
    const stale = fenceProblem();
    if (stale !== undefined) throw stale;
    let problem = refusal(intent, state.snap);
    if (problem !== undefined && !state.fresh) {
      const withFences = checkFences && fences === undefined;
      [fences, state] = await Promise.all([withFences ? readFences() : fences, readManifest()]);
      fenceFresh = withFences;
      problem = fenceProblem() ?? refusal(intent, state.snap);
    }
    if (problem !== undefined) throw problem;

    // 4. Raise the resource fences that are below this write's tokens.
    const raise = async (): Promise<void> => {
      const known = fences;
      if (known === undefined || !intent.fences.some((f, i) => needsRaise(f, known[i] ?? null))) return;
      if (!state.fresh) {
        state = await readManifest();
        const refused = refusal(intent, state.snap);
        if (refused !== undefined) throw refused;
      }
      fences = await Promise.all(intent.fences.map((f, i) => io.raiseFence(f, known[i] ?? null, signal)));
      // A raise's answer is as fresh as a read of that fence, but not of another fence read before it was awaited.
      fenceFresh = intent.fences.length === 1;
    };
    if (checkFences) await raise();

    /** The next manifest attempt, built on the current state and handed to the SDK (through `gate`: sent only once it opens). */
    const prepare = (dataKey: string | undefined, gate?: SendGate): Prepared => {
      const writeId = newId();
      const { header, inline } = build(intent, state, writeId, dataKey);
      const outcome = io.objects.write(manifestKey(io.options.prefix, key), encodeManifest(header, inline), condition(state.snap), signal, gate);
      return { attempt: { writeId, target: state.snap, ambiguous: false }, header, dataKey, outcome };
    };
    /** The attempt goes on the wire: from now on it may land. */
    const sending = (p: Prepared): Prepared => {
      attempts.push(p.attempt);
      if (p.dataKey !== undefined) bodies?.sent(p.dataKey);
      afterSend = undefined;
      return p;
    };

    /**
     * Steps 6 and 7: reads the resource fences again, right before the manifest PUT — the window a
     * newer holder can slip through is from this read to the PUT landing — and sends the PUT if they
     * admit the write without a raise (undefined otherwise: nothing was sent). The SDK prepares the
     * read while `after` (this attempt's upload) runs, and the PUT while the read is in flight, but
     * each goes on the wire only once what it is ordered after has answered: the read after the
     * upload, the PUT after the read, which must admit it. So the window is exactly what it would be
     * with each request prepared after the previous one answered.
     */
    const readFencesThenSend = async (dataKey: string | undefined, after: Promise<unknown> | undefined): Promise<Prepared | undefined> => {
      const readGate = after === undefined ? undefined : new SendGate();
      const sendGate = new SendGate();
      try {
        // What is on its way to the wire goes first (the upload, or the fence GET); the rest is prepared meanwhile.
        if (after !== undefined) await nextTurn();
        const reading = readFences(readGate);
        reading.catch(() => undefined); // awaited below: not an unhandled rejection meanwhile
        if (after === undefined) await nextTurn();
        const preparedAt = performance.now();
        const gated = prepare(dataKey, sendGate);
        if (after !== undefined) {
          await after;
          // A request signed long ago would be refused for its date (S3 allows 15 minutes): read anew.
          if (performance.now() - preparedAt > PREPARED_FOR_MS) return await readFencesThenSend(dataKey, undefined);
          readGate?.open();
        }
        fences = await reading;
        fenceFresh = true;
        const refused = fenceProblem();
        if (refused !== undefined) throw refuse(refused, state.snap);
        if (intent.fences.some((f, i) => needsRaise(f, fences?.[i] ?? null))) return undefined;
        if (performance.now() - preparedAt > PREPARED_FOR_MS) {
          sendGate.close();
          return sending(prepare(dataKey)); // the fences were just read: a PUT signed now goes out at once
        }
        const sent = sending(gated);
        sendGate.open();
        return sent;
      } finally {
        // Either gate not opened by now closes: its request is never sent.
        readGate?.close();
        sendGate.close();
      }
    };

    let throttled = 0;
    for (let attempt = 1; ; attempt++) {
      let sent: Prepared | undefined;
      while (sent === undefined) {
        // 5. This attempt's data object, named for the manifest it is sent against. An upload still
        // running is not waited for here when the fences are checked: step 6 holds the fence read until it is done.
        const target = state.snap?.header.writeId ?? null;
        const running = checkFences ? bodies?.running(target) : undefined;
        let dataKey = running?.key;
        if (running !== undefined) fenceFresh = false;
        else if (bodies !== undefined) {
          const prepared = await bodies.prepare(target);
          dataKey = prepared.key;
          if (prepared.waited) fenceFresh = false;
        }
        // No step 6 when nothing was awaited since the fences were read or raised (or they are not checked).
        if (!checkFences || fenceFresh) {
          sent = sending(prepare(dataKey));
          break;
        }
        sent = await readFencesThenSend(dataKey, running?.ready);
        // Lower than this write's token only if a fence object was reset; raising may read the manifest again.
        if (sent === undefined) await raise();
      }
      fenceFresh = false;

      // 7. Compare-and-swap the manifest (8: on success, accepted()).
      const outcome = await sent.outcome;
      if (outcome.ok) return accepted(io, intent, { etag: outcome.etag, header: sent.header }, sent.attempt.target, bodies);
      sent.attempt.ambiguous = outcome.failure === "ambiguous";
      signal?.throwIfAborted();
      if (outcome.failure === "fatal") throw outcome.error;

      // 9. Whatever went wrong, the manifest itself says whether one of our attempts landed. A first
      // failure is usually a remembered manifest gone stale; repeated ones are contention. Pause
      // before reading, not after: the next swap must go out on a manifest read just before.
      if (outcome.failure === "throttled") await throttledPause(++throttled, signal);
      else if (attempt > 1) {
        io.contended(key);
        await sleep(Math.random() * Math.min(2 ** attempt, 50), undefined, signal === undefined ? undefined : { signal });
      }
      [fences, state] = await Promise.all([checkFences ? readFences() : undefined, readManifest()]);
      fenceFresh = true;
      const now = state.snap;
      afterSend = now;
      const landed = attempts.find((a) => a.writeId === now?.header.writeId);
      if (now !== null && landed !== undefined) return accepted(io, intent, now, landed.target, bodies);
      if (outcome.failure === "precondition" && sent.attempt.target !== null && now?.etag === sent.attempt.target.etag && !io.objects.noteRefusedOwnEtag()) {
        throw refusedOwnEtag(manifestKey(io.options.prefix, key));
      }
      const refused = fenceProblem() ?? refusal(intent, now);
      if (refused !== undefined) throw refuse(refused, now);
      if (attempt >= io.options.maxAttempts) {
        throw new ContentionError(key, attempt, `write of ${JSON.stringify(key)} gave up after ${attempt} conflicting writes`);
      }
      if (checkFences) await raise();
    }
  } catch (err) {
    const cleanup = settle(io, key, attempts, bodies, afterSend);
    // An aborted write returns at once; otherwise what it leaves behind is settled before it throws.
    if (signal?.aborted === true) {
      io.background(() => cleanup);
      throw signal.reason;
    }
    await cleanup.catch(() => undefined);
    throw err;
  }
}

function build(intent: Intent, state: State, writeId: string, dataKey: string | undefined): { header: ManifestHeader; inline: Buffer | undefined } {
  const { content, key } = intent;
  const prev = state.snap?.header;
  if (content.kind === "carry") {
    if (prev === undefined) throw new Error("a transfer is built on the manifest it replaces"); // refusal() requires it
    const [from] = intent.fences;
    if (from === undefined) throw new Error("a transfer presents its from fence");
    return { header: transferHeader(prev, from, intent.writer, writeId), inline: state.inline };
  }
  const body: ManifestHeader["body"] =
    content.kind === "inline" ? { kind: "inline", size: content.bytes.length } : content.kind === "object" && dataKey !== undefined ? { kind: "object", dataKey } : { kind: "tombstone" };
  const header = nextHeader(prev, key, intent.writer, writeId, body, content.kind === "tombstone" ? undefined : intent.contentType);
  return { header, inline: content.kind === "inline" ? content.bytes : undefined };
}

/** The write landed: remember its manifest, and delete what nothing can name any more (in the background). */
function accepted(io: StoreIo, intent: Intent, snap: Snapshot, replaced: Snapshot | null, bodies: AttemptBodies | undefined): S3PutResult {
  io.remember(intent.key, snap);
  io.background(async () => {
    await Promise.all([bodies?.cleanup(snap.header), retire(io, replaced, snap.header)]);
  });
  return { version: snap.header.writeId, token: intent.writer.token };
}

/**
 * The body of a manifest that was replaced: no manifest names it any more, and none can come to —
 * the attempt it was made for landed once (and cannot again), and a transfer carrying it over could
 * only land on the manifest now replaced. Kept if the replacing manifest names it (a transfer).
 */
async function retire(io: StoreIo, replaced: Snapshot | null, by: ManifestHeader): Promise<void> {
  const old = replaced?.header.body;
  if (old?.kind !== "object" || (by.body.kind === "object" && by.body.dataKey === old.dataKey)) return;
  await io.deletions.delete(old.dataKey);
}

/**
 * After a failed write: deletes the data objects no manifest can come to name. If the manifest was
 * not read after the last attempt was sent, it is read now (in the background): an attempt that got
 * no answer may have landed, and then its body is the key's current one.
 */
async function settle(io: StoreIo, key: string, attempts: readonly Attempt[], bodies: AttemptBodies | undefined, afterSend: Snapshot | null | undefined): Promise<void> {
  if (attempts.length === 0 || afterSend !== undefined) {
    await bodies?.cleanup(attempts.length === 0 ? undefined : (afterSend?.header ?? null));
    return;
  }
  const now = (await io.readManifest(key, undefined))?.snap ?? null;
  const landed = attempts.find((a) => a.writeId === now?.header.writeId);
  await Promise.all([bodies?.cleanup(now?.header ?? null), now !== null && landed !== undefined ? retire(io, landed.target, now.header) : undefined]);
}

function outcomeUnknown(intent: Intent, refusal: Error): Error {
  return new Error(`write of ${JSON.stringify(intent.key)}: ${refusal.message}, but an earlier attempt got no answer and may still land; the outcome is unknown`, { cause: refusal });
}
