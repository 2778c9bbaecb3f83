import { setTimeout as sleep } from "node:timers/promises";
import { ContentionError } from "../errors.js";
import { AttemptBodies } from "./bodies.js";
import type { WriteOutcome } from "./conditional.js";
import { expectsRaise, raise, readBatch, send } from "./fencing.js";
import { refusedOwnEtag, typedFailure } from "./failures.js";
import { NeverWrittenError, type Intent, type S3PutResult } from "./intent.js";
import { throttledPause, type Snapshot, type StoreIo } from "./io.js";
import { manifestKey } from "./layout.js";
import type { ManifestHeader } from "./manifest.js";
import { next, outcomeOpen, waited, type Prepared, type Run } from "./run.js";

/**
 * The S3 write, a driver around a pure decision (decision.ts, `decide`): it asks what to do next,
 * does that I/O, and asks again, until the decision is to refuse or an attempt landed. The manifest
 * CAS is the single request that decides; everything before it only avoids sending a write that is
 * bound to be refused. The steps are numbered as in PROTOCOL.md, "S3", "The write" (step 1,
 * validation, is the caller's). Every wait of the write is counted (run.ts, `waited`): a PUT goes out
 * only on fence objects read after the last one.
 */
export async function writeManifest(io: StoreIo, intent: Intent): Promise<S3PutResult> {
  const run = start(io, intent);
  try {
    // Settles by the call's deadline at the latest: a request held past it is abandoned (and aborted).
    return await intent.deadline.race(steps(run));
  } catch (err) {
    throw await failed(run, err);
  }
}

async function steps(run: Run): Promise<S3PutResult> {
  await read(run); // 2
  for (let attempt = 1; ;) {
    const decision = next(run); // 3
    if (decision.kind === "refuse") throw decision.error;
    if (decision.kind === "read") await readBatch(run, { fences: decision.fences, manifest: true });
    if (decision.kind === "raise") await raise(run); // 4
    if (decision.kind !== "put" && decision.kind !== "read-fences") continue;
    const sent = await send(run); // 5, 6, 7
    if (sent === undefined) continue; // the fence read asked for a raise first: nothing was sent
    const outcome = await waited(run, sent.outcome);
    if (outcome.ok) return accepted(run, { etag: outcome.etag, header: sent.header }, sent.attempt.target); // 8
    const landed = await afterFailure(run, sent, outcome, attempt++); // 9
    if (landed !== undefined) return landed;
  }
}

function start(io: StoreIo, intent: Intent): Run {
  const { content } = intent;
  const bodies =
    content.kind === "object"
      ? new AttemptBodies(io, intent.key, content.payload, content.length, intent.contentType, intent.deadline)
      : undefined;
  return {
    io,
    intent,
    bodies,
    checked: io.options.checkResourceFence,
    manifest: { snap: null, inline: undefined, read: false },
    fences: { snaps: undefined, readIn: undefined },
    waits: 0,
    attempts: [],
    afterSend: undefined,
    throttled: 0,
  };
}

/**
 * 2. What the write reads before it decides anything: a latency choice, never a safety one (the
 * decision asks for whatever else it needs). A key this store has not seen is assumed absent: the
 * write goes out as a create, which fails if the key exists (never wrongly succeeds). A fence raise
 * needs the manifest read first (a write refused for its key's owner must raise nothing): when this
 * store expects one, the manifest is read alongside. Bytes in memory start uploading now, named for
 * the manifest this store expects to replace. The fences are read now only when they must be known
 * before anything else is sent: for a raise, before a stream (a stale writer never sends it), or
 * alongside a manifest read the write waits for anyway. Otherwise they are read in step 6, right
 * before the manifest PUT.
 */
async function read(run: Run): Promise<void> {
  const { io, intent, bodies } = run;
  const { content } = intent;
  const remembered = io.recall(intent.key);
  const stream = content.kind === "object" && !Buffer.isBuffer(content.payload);
  const versioned = typeof intent.ifVersion === "string" || content.kind === "carry";
  const raising = expectsRaise(run);
  const readFirst = content.kind === "carry" || raising || (remembered === undefined ? versioned || stream : remembered.readFirst);
  run.manifest = { snap: remembered?.snap ?? null, inline: undefined, read: false };
  const uploading = bodies !== undefined && !stream && !(remembered === undefined && versioned);
  if (uploading) bodies.begin(run.manifest.snap?.header.writeId ?? null);
  await readBatch(run, { fences: raising || stream || (readFirst && !uploading), manifest: readFirst });
}

/**
 * 9. Whatever went wrong, the manifest itself says whether one of our attempts landed. Resolves the
 * result if one did, undefined to decide on the next attempt; throws a refusal, or when giving up.
 */
async function afterFailure(
  run: Run,
  sent: Prepared,
  outcome: WriteOutcome & { ok: false },
  attempt: number,
): Promise<S3PutResult | undefined> {
  const { io, intent } = run;
  sent.attempt.ambiguous = outcome.failure === "ambiguous";
  intent.signal.throwIfAborted();
  if (outcome.failure === "fatal") throw outcome.error;
  await waited(run, pause(run, outcome, attempt));
  await readBatch(run, { fences: true, manifest: true });
  const now = run.manifest.snap;
  run.afterSend = now;
  const landed = run.attempts.find((a) => a.writeId === now?.header.writeId);
  if (now !== null && landed !== undefined) return accepted(run, now, landed.target);
  if (
    outcome.failure === "precondition" &&
    sent.attempt.target !== null &&
    now?.etag === sent.attempt.target.etag &&
    !io.objects.noteRefusedOwnEtag()
  ) {
    throw refusedOwnEtag(manifestKey(io.options.prefix, intent.key));
  }
  // Thrown as OutcomeUnknownError while an attempt may have landed (failed(): typedFailure).
  const decision = next(run);
  if (decision.kind === "refuse") throw decision.error;
  if (attempt >= io.options.maxAttempts) {
    throw new ContentionError(intent.key, attempt, `write of ${JSON.stringify(intent.key)} gave up after ${attempt} conflicting writes`);
  }
  return undefined;
}

/**
 * Before reading again, not after: the next swap must go out on a read made just before. A throttled
 * PUT waits as the SDK would have; a first failure is usually a remembered manifest gone stale (no
 * pause), repeated ones are contention.
 */
async function pause(run: Run, outcome: WriteOutcome & { ok: false }, attempt: number): Promise<void> {
  const { signal } = run.intent;
  if (outcome.failure === "throttled") return throttledPause(++run.throttled, signal);
  if (attempt === 1) return;
  run.io.contended(run.intent.key);
  await sleep(Math.random() * Math.min(2 ** attempt, 50), undefined, { signal });
}

/** 8. The write landed: remember its manifest, and delete what nothing can name any more (in the background). */
function accepted(run: Run, snap: Snapshot, replaced: Snapshot | null): S3PutResult {
  const { io, intent, bodies } = run;
  io.remember(intent.key, snap);
  io.background(async () => {
    await Promise.all([bodies?.cleanup(snap.header), retire(io, replaced, snap.header)]);
  });
  return { version: snap.header.writeId, token: intent.writer.token };
}

/**
 * The error a failed write throws (failures.ts: typed by what went wrong, and unknown while an
 * attempt may have landed), after settling what it leaves behind — within the call's deadline; past
 * it (or once aborted), the settling goes on in the background and flush() waits for it.
 */
async function failed(run: Run, err: unknown): Promise<unknown> {
  const { io, intent } = run;
  // Decided now, from what the write knows: the settling below reads the key, but cannot tell more.
  const open = outcomeOpen(run);
  const call = { operation: intent.operation, key: intent.key, bucket: io.options.bucket, deadline: intent.deadline, open };
  const typed = err instanceof NeverWrittenError && !open ? err : typedFailure(err, call);
  const cleanup = settle(run);
  io.background(() => cleanup);
  await intent.deadline.race(cleanup).catch(() => undefined);
  return typed;
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
 * not read after the last attempt was sent, it is read now: an attempt that got no answer may have
 * landed, and then its body is the key's current one.
 */
async function settle(run: Run): Promise<void> {
  const { io, intent, attempts, bodies, afterSend } = run;
  if (attempts.length === 0 || afterSend !== undefined) {
    await bodies?.cleanup(attempts.length === 0 ? undefined : (afterSend?.header ?? null));
    return;
  }
  const now = (await io.readManifest(intent.key, io.cleanupSignal()))?.snap ?? null;
  const landed = attempts.find((a) => a.writeId === now?.header.writeId);
  await Promise.all([
    bodies?.cleanup(now?.header ?? null),
    now !== null && landed !== undefined ? retire(io, landed.target, now.header) : undefined,
  ]);
}
