import { Readable } from "node:stream";
import type { ObjectStore, SignalOptions, StoreCapabilities, TransferOptions, WriteOptions, WriteResult } from "../contract.js";
import type { S3Client } from "@aws-sdk/client-s3";
import { context } from "@opentelemetry/api";
import { InvalidArgumentError } from "@fenced/fence";
import { ContentionError, StoreUnavailableError, VersionMismatchError } from "../errors.js";
import { assertKey, checkFence, type CheckedFence, type Fence, type FenceSet } from "../fence.js";
import { observeCall, observedCall, tracedAwsClient } from "../observe.js";
import { watchStalls, type S3Body } from "./body.js";
import { assertBody, assertContentLength, assertContentType, toPayload } from "../objects/body.js";
import type { EtagForm } from "./conditional.js";
import { Deadline } from "../deadline.js";
import { typedFailure } from "./failures.js";
import { CasCalls } from "../cas/calls.js";
import { S3Io } from "./io.js";
import { probeKeyPrefix } from "../cas/layout.js";
import { signalOptions } from "../cas/options.js";
import { sweepOptions, validateOptions, writeOptions, type FencedS3Options, type S3UpdateOptions, type S3WriteOptions } from "./options.js";
import { Sweep, type S3SweepOptions, type S3SweepProgress, type S3SweepReport } from "./sweep.js";
import { refusal, type Content, type Intent } from "../cas/intent.js";
import { meta, openCurrent, readCurrent, type S3Bytes, type S3Object } from "./read.js";
import { writeManifest } from "../cas/write.js";

export type { S3Body } from "./body.js";
export type { FencedS3Options, S3UpdateOptions, S3WriteOptions } from "./options.js";
export type { S3SweepOptions, S3SweepProgress, S3SweepReport } from "./sweep.js";
export type { S3Bytes, S3Object } from "./read.js";

export interface S3VerifyResult {
  /** How this backend wants ETags spelled in If-Match (radosgw: bare only). */
  readonly etagForm: EtagForm;
}

/**
 * Fenced writes to S3. Each key has a small manifest that is compare-and-swapped (If-Match on its
 * ETag, If-None-Match: * to create); its body is unique per write, so the ETag check cannot be fooled
 * by a rewrite of identical bytes. It records the resource that owns the key and, per resource, the
 * highest token accepted and the holder that presented it. A write the manifest does not admit is
 * refused and changes nothing. See PROTOCOL.md, "S3".
 */
export class FencedS3 implements ObjectStore {
  /** No transaction over objects: register() raises each fence object on its own. A tombstone is a manifest, ifVersion may name it. */
  readonly capabilities: StoreCapabilities = Object.freeze({ atomicRegister: false, ifVersionMatchesTombstone: true });
  readonly bucket: string;
  readonly prefix: string;
  private readonly io: S3Io;
  private readonly calls: CasCalls;

  constructor(client: S3Client, options: FencedS3Options) {
    if (typeof client !== "object" || client === null || typeof (client as { send?: unknown }).send !== "function") {
      throw new InvalidArgumentError("client", "must be an S3Client from @aws-sdk/client-s3");
    }
    const resolved = validateOptions(options);
    this.bucket = resolved.bucket;
    this.prefix = resolved.prefix;
    // Each request a span of its own (../observe.ts); the caller's client is not changed.
    this.io = new S3Io(tracedAwsClient(client, "S3"), resolved);
    this.calls = new CasCalls(this.io, "s3");
  }

  /**
   * Proves the backend refuses a stale If-Match and an If-None-Match: * on an existing key; throws
   * StoreSetupError ("conditional-writes-unsupported") otherwise.
   */
  async verify(options?: SignalOptions): Promise<S3VerifyResult> {
    const { signal } = signalOptions(options);
    return this.calls.call("verify", undefined, signal, (deadline) => this.io.objects.probe(probeKeyPrefix(this.prefix), deadline.signal));
  }

  /**
   * Raises the resource's fence object to this fence (writes no data): from then on a lower token, or
   * the same token from another holder, is refused on every key of the resource. StaleTokenError if
   * the fence object does not admit it. Several fences (an array, or a lease of several resources):
   * every resource's fence object, all at once. One refused: StaleTokenError (the first in the order
   * given) once all have ended, each of the others raised or not as if registered alone — S3 has no
   * transaction over objects, and a raise alone is harmless: it only refuses older holders.
   */
  async register(fence: Fence | FenceSet, options?: SignalOptions): Promise<void> {
    await this.calls.register(fence, options);
  }

  /**
   * The resource's fence object as it is now: the highest token registered for the resource, or
   * raised by a write through a store with checkResourceFence (the default), and the holder that
   * presented it; undefined if there is none (nothing registered or written with it). It is what every
   * write with checkResourceFence is checked against. A key's manifest may hold a higher token for
   * the resource only if that write did not raise the fence object: one through a store with
   * checkResourceFence: false, or after the fence object was deleted by hand. PROTOCOL.md, "S3".
   */
  fence(resource: string, options?: SignalOptions): Promise<CheckedFence | undefined> {
    return this.calls.fence(resource, options);
  }

  /**
   * Deletes the data objects no manifest names or can come to name (orphans of writers that died),
   * and aborts the incomplete multipart uploads of such objects; safe beside running writers however
   * long they pause (S3SweepOptions; PROTOCOL.md, "Data objects and cleanup"). It takes everything
   * under the prefix for the store's own (FencedS3Options.prefix). A failure throws the typed error
   * and no report: the last onProgress call carried the totals up to the last page dealt with.
   */
  async sweep(options?: S3SweepOptions): Promise<S3SweepReport> {
    const checked = sweepOptions<S3SweepProgress>(options);
    return new Sweep(this.io, checked).run();
  }

  async put(key: string, body: S3Body, options: S3WriteOptions): Promise<WriteResult> {
    assertKey(key);
    assertBody(body);
    const o = writeOptions(options);
    const { contentType } = o;
    assertContentType(contentType);
    assertContentLength(o.contentLength, body);
    const content = this.content(toPayload(body), o.contentLength);
    const intent = this.intent("put", key, o.fence, content, o.ifVersion, contentType, this.deadline(o.signal));
    // The write runs in the call's span (each S3 request its child), entered straight from here.
    const call = observeCall({ store: "s3", operation: "put", key, fences: [o.fence] });
    return call.ended(context.with(call.context, writeManifest, undefined, this.io, intent));
  }

  /** Writes a tombstone (the ratchet and the key's owner survive it); get() then reads undefined. */
  async delete(key: string, options: WriteOptions): Promise<WriteResult> {
    assertKey(key);
    const o = writeOptions(options);
    const intent = this.intent("delete", key, o.fence, { kind: "tombstone" }, o.ifVersion, undefined, this.deadline(o.signal));
    const call = observeCall({ store: "s3", operation: "delete", key, fences: [o.fence] });
    return call.ended(context.with(call.context, writeManifest, undefined, this.io, intent));
  }

  /**
   * Hands the key to another resource: one manifest compare-and-swap that requires the key to belong
   * to from.resource, admits `from` and `to` against their resources' entries on the key and their
   * fence objects (raising both), and records `to` as the writer and to.resource as the owner. The
   * body is unchanged; the version is new. All or nothing at that one PUT. Resolves undefined, and
   * writes no manifest, if the key was never written (no manifest, not even a tombstone); with
   * ifVersion that is a VersionMismatchError instead. The manifest is read before any fence object
   * is raised, so a transfer of a key never written normally raises nothing; but one that finds the
   * manifest gone only after a failed attempt may have raised both fence objects by then (a raise
   * alone never harms safety).
   */
  async transfer(key: string, options: TransferOptions): Promise<WriteResult | undefined> {
    assertKey(key);
    return this.calls.transfer(key, options);
  }

  /**
   * The key's current version, its body an open stream (consume or destroy it). The call is bounded
   * by timeoutMs; the body stream then errors with StoreUnavailableError ("timeout") if no byte of
   * it arrives for timeoutMs while it is being read. options.signal aborts the call (its reason is
   * thrown), not the body stream once handed over.
   */
  async get(key: string, options?: SignalOptions): Promise<S3Object | undefined> {
    assertKey(key);
    const { signal } = signalOptions(options);
    const found = await this.calls.call("get", key, signal, (deadline) => openCurrent(this.io, key, deadline.signal));
    const { timeoutMs } = this.io.options;
    if (found !== undefined) watchStalls(found.body, timeoutMs, () => new StoreUnavailableError("s3", "timeout", "get"));
    return found;
  }

  /** The key's current version with its body read whole. options.signal as for get(). */
  async getBytes(key: string, options?: SignalOptions): Promise<S3Bytes | undefined> {
    assertKey(key);
    const { signal } = signalOptions(options);
    const current = await this.calls.call("get", key, signal, (deadline) => readCurrent(this.io, key, deadline.signal));
    return current?.bytes === undefined ? undefined : { ...meta(current.snap.header), body: current.bytes };
  }

  /**
   * Read-modify-write: reads the current body, calls fn, and writes its result only if the key is
   * still at the version read (and the storage admits the fence); on a version conflict, reads and
   * calls fn again.
   */
  async update(key: string, fn: (old: S3Bytes | undefined) => S3Body | Promise<S3Body>, options: S3UpdateOptions): Promise<WriteResult> {
    assertKey(key);
    if (typeof fn !== "function") throw new InvalidArgumentError("fn", "update needs a function (old) => new body");
    const o = writeOptions(options);
    const { contentType } = o;
    assertContentType(contentType);
    const attempts = o.maxAttempts ?? this.io.options.maxAttempts;
    return observedCall({ store: "s3", operation: "update", key, fences: [o.fence] }, () =>
      this.updateWithin(key, fn, { ...o, contentType }, attempts),
    );
  }

  private async updateWithin(
    key: string,
    fn: (old: S3Bytes | undefined) => S3Body | Promise<S3Body>,
    o: ReturnType<typeof writeOptions> & { readonly contentType: string | undefined },
    attempts: number,
  ): Promise<WriteResult> {
    const deadline = this.deadline(o.signal);
    try {
      return await this.updateRounds(key, fn, o, attempts, deadline);
    } catch (err) {
      // The caller's function's own error is the caller's, whatever it looks like.
      if (err instanceof ThrownByCaller) throw err.error;
      // Its writes' failures are typed already (and unknown if an attempt may have landed); its reads' are typed here.
      throw typedFailure(err, { operation: "update", key, bucket: this.bucket, deadline, open: false });
    } finally {
      deadline.end(true);
    }
  }

  private async updateRounds(
    key: string,
    fn: (old: S3Bytes | undefined) => S3Body | Promise<S3Body>,
    o: ReturnType<typeof writeOptions> & { readonly contentType: string | undefined },
    attempts: number,
    deadline: Deadline,
  ): Promise<WriteResult> {
    for (let attempt = 0; attempt < attempts; attempt++) {
      const current = await deadline.race(readCurrent(this.io, key, deadline.signal));
      // A holder the key refuses (stale, or naming another resource) learns it before computing anything.
      const refused = refusal({ key, owner: o.fence.resource, fences: [o.fence], ifVersion: undefined }, current?.snap ?? null);
      if (refused !== undefined) throw refused;
      const old = current?.bytes === undefined ? undefined : { ...meta(current.snap.header), body: current.bytes };
      // The caller's function runs on the caller's time: the deadline's clock stops meanwhile.
      const resume = deadline.suspend();
      let next: S3Body;
      try {
        next = await fn(old);
      } catch (err) {
        throw new ThrownByCaller(err);
      } finally {
        resume();
      }
      assertBody(next, "update's result");
      try {
        const version = current === null ? null : current.snap.header.writeId;
        const content = this.content(toPayload(next), undefined);
        // The rounds share the call's deadline: updateWithin() ends it.
        const intent = this.intent("update", key, o.fence, content, version, o.contentType ?? old?.contentType, deadline);
        return await writeManifest(this.io, { ...intent, endDeadline: false });
      } catch (err) {
        if (!(err instanceof VersionMismatchError)) throw err;
      }
    }
    throw new ContentionError(
      key,
      attempts,
      `update ${JSON.stringify(key)} gave up after ${attempts} attempts: the key kept changing under it`,
    );
  }

  /** Waits for the background deletion of superseded data objects. */
  async flush(): Promise<void> {
    await this.io.flush();
  }

  private content(payload: Buffer | Readable, length: number | undefined): Content {
    if (Buffer.isBuffer(payload) && payload.length <= this.io.options.inlineLimit) return { kind: "inline", bytes: payload };
    return { kind: "object", payload, length };
  }

  /** A call's deadline: timeoutMs from now, aborted early by the caller's signal. */
  private deadline(signal: AbortSignal | undefined): Deadline {
    return new Deadline(this.io.options.timeoutMs, signal);
  }

  /**
   * One write of the key's manifest under one fence (put, delete, update's round), within `deadline`
   * — which the write ends once over (update's rounds override that). ifVersion: undefined = any
   * version, null = the key must be absent (update of an absent key).
   */
  private intent(
    operation: "put" | "delete" | "update",
    key: string,
    fence: ReturnType<typeof checkFence>,
    content: Content,
    ifVersion: string | null | undefined,
    contentType: string | undefined,
    deadline: Deadline,
  ): Intent {
    const signal = deadline.signal;
    return {
      key,
      owner: fence.resource,
      fences: [fence],
      writer: fence,
      ifVersion,
      content,
      contentType,
      operation,
      deadline,
      signal,
      endDeadline: true,
    };
  }
}

/** What update()'s function threw: passed on as it is, never read as the backend's failure. */
class ThrownByCaller extends Error {
  constructor(readonly error: unknown) {
    super("update's function threw");
  }
}
