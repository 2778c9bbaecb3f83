import { setTimeout as sleep } from "node:timers/promises";
import { InvalidArgumentError } from "@fenced/fence";
import { ContentionError } from "../errors.js";
import type { WriteOutcome } from "../conditional/port.js";
import type { WriteResult } from "../contract.js";
import { build, NeverWrittenError, type Intent } from "./intent.js";
import { condition, throttledPause, type Snapshot, type StoreIo } from "./io.js";
import { manifestKey, newId } from "./layout.js";
import { encodeManifest, type ManifestHeader } from "./manifest.js";
import { dataObject, fencesDelivered, next, outcomeOpen, readManifest, type Run, type Sent } from "./run.js";

/**
 * The write, a driver around a pure decision (decision.ts, `decide`): it asks what to do next,
 * does that I/O, and asks again, until the decision is to refuse or an attempt landed. The manifest
 * CAS is the single request that decides; everything before it only avoids sending a write that is
 * bound to be refused. The steps are numbered as in PROTOCOL.md, "S3", "The write" (step 1,
 * validation, is the caller's). A PUT goes out only on a fence read the write has awaited nothing
 * since (run.ts, `fencesCurrent`: each read is stamped with where the write stood).
 */
export async function writeManifest(io: StoreIo, intent: Intent): Promise<WriteResult> {
  const run = start(io, intent);
  try {
    // Settles by the call's deadline at the latest: a request held past it is abandoned (and aborted).
    return await intent.deadline.race(steps(run));
  } catch (err) {
    throw await failed(run, err);
  } finally {
    if (intent.endDeadline) intent.deadline.end(true); // an upload the write did not use in the end is aborted: flush() never waits for it
  }
}

async function steps(run: Run): Promise<WriteResult> {
  await read(run); // 2
  for (let attempt = 1; ;) {
    const decision = next(run); // 3
    if (decision.kind === "refuse") throw decision.error;
    if (decision.kind === "read") await readBatch(run, { fences: decision.fences, manifest: true });
    if (decision.kind === "raise") await raise(run); // 4
    if (decision.kind !== "put" && decision.kind !== "read-fences") continue;
    const sent = await putManifest(run); // 5, 6, 7
    if (sent === undefined) continue; // the fence read asked for a raise first: nothing was sent
    const outcome = await sent.outcome;
    if (outcome.ok) return accepted(run, { etag: outcome.etag, header: sent.header }, sent.attempt.target); // 8
    const landed = await afterFailure(run, sent, outcome, attempt++); // 9
    if (landed !== undefined) return landed;
  }
}

/**
 * Steps 5 to 7, on a decision to put or to read the fences first: the attempt's data object; then,
 * unless the fence read the write has is current after that, the fences read again (step 6); then
 * the manifest PUT, on a decision to put. Undefined: that read asks for a raise first, and nothing
 * was sent. The PUT goes out in the same turn as the decision on it (nothing awaited in between),
 * so its fence read's answer is in before its first byte leaves, and the window a newer holder can
 * slip through is the one from that read to the PUT landing (PROTOCOL.md, "The write", step 7).
 */
async function putManifest(run: Run): Promise<Sent | undefined> {
  const { io, intent } = run;
  const dataKey = await dataObject(run);
  if (next(run).kind !== "put") await readBatch(run, { fences: true, manifest: false }); // 6
  const decision = next(run);
  if (decision.kind === "refuse") throw decision.error;
  if (decision.kind !== "put") return undefined;
  // 7. THE RULE the fenced write rests on, checked here and nowhere else: a manifest PUT only on a
  // decision to put, made — with the fence objects checked — on a current fence read that admits it.
  intent.signal.throwIfAborted();
  const { manifest } = run;
  const writeId = newId();
  const { header, inline } = build(intent, manifest, writeId, dataKey);
  const key = manifestKey(io.options.prefix, intent.key);
  const encoded = encodeManifest(header, inline);
  // A backend's record limit (DynamoDB: an item's 400 KB) binds the manifest, whose header grows with
  // every resource that has owned the key: refused here, before it is sent, not by the backend after.
  const { maxRecordBytes } = io.objects.capabilities;
  if (encoded.length > maxRecordBytes) {
    throw new InvalidArgumentError(
      "value",
      `with the key's manifest header it makes a record of ${encoded.length} bytes, over the backend's limit of ${maxRecordBytes}`,
    );
  }
  const outcome = io.objects.write(key, encoded, condition(manifest.snap), intent.signal);
  // Handed to the SDK: from now on it may land, so it is recorded whatever happens next.
  const attempt = { writeId, target: manifest.snap, ambiguous: true };
  run.attempts.push(attempt);
  if (dataKey !== undefined) run.bodies?.sent(dataKey, attempt);
  run.afterSend = undefined;
  return { attempt, header, outcome };
}

function start(io: StoreIo, intent: Intent): Run {
  const { content } = intent;
  const bodies =
    content.kind === "object"
      ? io.attemptBodies(intent.key, content.payload, content.length, intent.contentType, intent.deadline)
      : undefined;
  return {
    io,
    intent,
    bodies,
    checked: io.options.checkResourceFence,
    manifest: { snap: null, inline: undefined, read: false },
    fences: { snaps: undefined, stamp: undefined },
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

/*
 * The resource fence objects' side of a write: reading them (alone, or with the manifest) and
 * raising them, each answer stamped with where the write stands (run.ts, `fencesDelivered`). With
 * checkResourceFence: false (`run.checked` false) nothing reads or raises a fence object.
 */

/**
 * Reads the fence objects and the manifest, each if asked, in parallel (one request each). The
 * fences are stamped once both have answered: a PUT may go out on them while the write awaits
 * nothing else.
 */
async function readBatch(run: Run, what: { readonly fences: boolean; readonly manifest: boolean }): Promise<void> {
  const { io, intent } = run;
  const fences = what.fences && run.checked;
  const [snaps] = await Promise.all([
    fences ? Promise.all(intent.fences.map((f) => io.readFence(f.resource, intent.signal))) : undefined,
    what.manifest ? readManifest(run) : undefined,
  ]);
  if (snaps !== undefined) fencesDelivered(run, snaps);
}

/** Whether this store expects a fence object to need raising (a guess: it only decides what step 2 reads). */
function expectsRaise(run: Run): boolean {
  return run.checked && run.intent.fences.some((f) => run.io.expectsRaise(f));
}

/** Step 4, on a decision to raise: the fences are known, one is below this write's token, and the manifest read in this write admits it. */
async function raise(run: Run): Promise<void> {
  const { io, intent } = run;
  const known = run.fences.snaps;
  if (known === undefined) throw new Error("a raise decided before the fence objects were read"); // decide() never does
  const snaps = await Promise.all(intent.fences.map((f, i) => io.raiseFence(f, known[i] ?? null, intent.signal)));
  // A raise's answer is as current as a read of that fence, but not of another fence raised beside it.
  fencesDelivered(run, snaps, intent.fences.length === 1);
}

/**
 * 9. Whatever went wrong, the manifest itself says whether one of our attempts landed. Resolves the
 * result if one did, undefined to decide on the next attempt; throws a refusal, or when giving up.
 */
async function afterFailure(
  run: Run,
  sent: Sent,
  outcome: WriteOutcome & { ok: false },
  attempt: number,
): Promise<WriteResult | undefined> {
  const { io, intent } = run;
  sent.attempt.ambiguous = outcome.failure === "ambiguous";
  intent.signal.throwIfAborted();
  if (outcome.failure === "fatal") throw outcome.error;
  await pause(run, outcome, attempt);
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
    throw io.failures.refusedOwnEtag(manifestKey(io.options.prefix, intent.key));
  }
  // Thrown as OutcomeUnknownError while an attempt may have landed (failed(): io.failures.typed).
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
function accepted(run: Run, snap: Snapshot, replaced: Snapshot | null): WriteResult {
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
  const call = { operation: intent.operation, key: intent.key, deadline: intent.deadline, open };
  const typed = err instanceof NeverWrittenError && !open ? err : io.failures.typed(err, call);
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
  await io.retireData(old.dataKey);
}

/**
 * After a failed write: deletes the data objects no manifest can come to name. If the manifest was
 * not read after the last attempt was sent, it is read now: an attempt that got no answer may have
 * landed, and then its body is the key's current one.
 */
async function settle(run: Run): Promise<void> {
  const { io, intent, attempts, bodies, afterSend } = run;
  // Without data objects there is nothing to delete, and so nothing to read the key for.
  if (!io.objects.capabilities.dataObjects) return;
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
