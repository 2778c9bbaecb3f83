import { Readable } from "node:stream";
import type { S3Client } from "@aws-sdk/client-s3";
import { StaleTokenError, VersionMismatchError } from "./errors.js";
import { assertFence, assertKey, type Fence } from "./fence.js";
import { assertBody, assertContentLength, assertContentType, openData, readAll, toPayload, uploadData, type S3Body } from "./s3-body.js";
import { ConditionalObjects, type Condition, type EtagForm } from "./s3-conditional.js";
import { validateOptions, writeOptions, type FencedS3Options, type ResolvedOptions, type S3DeleteOptions, type S3UpdateOptions, type S3WriteOptions } from "./s3-options.js";
import {
  dataKey,
  decodeFence,
  decodeManifest,
  encodeFence,
  encodeManifest,
  fenceKey,
  highestFor,
  manifestKey,
  newId,
  nextHeader,
  probeKeyPrefix,
  type ManifestHeader,
} from "./s3-manifest.js";

export type { S3Body } from "./s3-body.js";
export type { FencedS3Options, S3DeleteOptions, S3UpdateOptions, S3WriteOptions } from "./s3-options.js";

export interface S3PutResult {
  /** Opaque; pass it back as ifVersion. Unique per write, tombstones included; never reused. */
  readonly version: string;
  /** The token the write was accepted under. */
  readonly token: bigint;
}

interface S3Meta {
  readonly version: string;
  /** Token of the write that produced this version. */
  readonly token: bigint;
  /** Resource whose fence that write carried. */
  readonly resource: string;
  readonly contentType: string | undefined;
}

/** get(): the body is an open stream; consume or destroy it (it may hold a connection). */
export interface S3Object extends S3Meta {
  readonly body: Readable;
  readonly size: number | undefined;
}

/** getBytes() and update()'s callback: the body read whole into memory. */
export interface S3Bytes extends S3Meta {
  readonly body: Buffer;
}

export interface S3VerifyResult {
  /** How this backend wants ETags spelled in If-Match (radosgw: bare only). */
  readonly etagForm: EtagForm;
}

/** The manifest as last read or written, identified by its bare ETag; null means "known absent". */
interface Snapshot {
  readonly etag: string;
  readonly header: ManifestHeader;
}

interface FenceSnapshot {
  readonly etag: string;
  readonly token: bigint;
}

type Content =
  | { readonly kind: "inline"; readonly bytes: Buffer }
  | { readonly kind: "object"; readonly payload: Buffer | Readable; readonly length: number | undefined }
  | { readonly kind: "tombstone" };

const CACHE_ENTRIES = 4096;
/** Writes of a key that read its manifest first after this store lost a race on it twice in one write. */
const CONTENDED_READ_FIRST = 16;

/**
 * Fenced writes to S3. Each key has a small manifest that is compare-and-swapped (If-Match on its
 * ETag, If-None-Match: * to create); its body is unique per write, so the ETag check cannot be fooled
 * by a rewrite of identical bytes, and it carries the per-key, per-resource ratchet. A write whose
 * token is lower than the manifest's is refused and changes nothing. See PROTOCOL.md, "S3".
 */
export class FencedS3 {
  readonly bucket: string;
  readonly prefix: string;
  private readonly options: ResolvedOptions;
  private readonly objects: ConditionalObjects;
  /**
   * Last manifest seen per key: a write whose CAS on it succeeds needs no read first. After a lost
   * race on a key, its next few writes read first anyway: a writer swapping on a remembered manifest
   * takes one round trip where a loser needs two (read, swap), so under steady contention the same
   * writers would keep winning and a loser could starve.
   */
  private readonly cache = new Map<string, { snap: Snapshot | null; readFirst: number }>();
  /** Best-effort deletions of superseded data objects, awaited by flush(). */
  private readonly pending = new Set<Promise<void>>();

  constructor(
    private readonly client: S3Client,
    options: FencedS3Options,
  ) {
    if (typeof client !== "object" || client === null || typeof (client as { send?: unknown }).send !== "function") {
      throw new TypeError("client must be an S3Client from @aws-sdk/client-s3");
    }
    this.options = validateOptions(options);
    this.bucket = this.options.bucket;
    this.prefix = this.options.prefix;
    this.objects = new ConditionalObjects(client, this.bucket);
  }

  /** Proves the backend refuses a stale If-Match and an If-None-Match: * on an existing key; throws otherwise. */
  async verify(): Promise<S3VerifyResult> {
    return this.objects.probe(probeKeyPrefix(this.prefix));
  }

  /** Raises the resource's fence to this token (writes no data); StaleTokenError if it is already higher. */
  async register(fence: Fence): Promise<void> {
    assertFence(fence);
    await this.raiseFence({ resource: fence.resource, token: fence.token }, undefined);
  }

  async put(key: string, body: S3Body, options: S3WriteOptions): Promise<S3PutResult> {
    assertKey(key);
    assertBody(body);
    const o = writeOptions(options);
    assertContentType(o.contentType);
    assertContentLength(o.contentLength, body);
    return this.commit(key, o.fence, this.content(toPayload(body), o.contentLength), o.ifVersion, o.contentType);
  }

  /** Writes a tombstone (the ratchet survives it); get() then reads undefined. */
  async delete(key: string, options: S3DeleteOptions): Promise<S3PutResult> {
    assertKey(key);
    const o = writeOptions(options);
    return this.commit(key, o.fence, { kind: "tombstone" }, o.ifVersion, undefined);
  }

  async get(key: string): Promise<S3Object | undefined> {
    assertKey(key);
    for (let attempt = 0; attempt < this.options.maxAttempts; attempt++) {
      const found = await this.readManifest(key);
      if (found === null) return undefined;
      const { header } = found.snap;
      if (header.body.kind === "tombstone") return undefined;
      if (header.body.kind === "inline") {
        const bytes = found.inline ?? Buffer.alloc(0);
        return { ...meta(header), body: Readable.from([bytes], { objectMode: false }), size: bytes.length };
      }
      const data = await openData(this.client, this.bucket, header.body.dataKey);
      // Gone: superseded and cleaned up after we read the manifest. The newer manifest has the newer body.
      if (data === undefined) continue;
      return { ...meta(header), body: data.body, size: data.size };
    }
    throw new Error(`get ${JSON.stringify(key)}: the key changed ${this.options.maxAttempts} times while it was being read`);
  }

  async getBytes(key: string): Promise<S3Bytes | undefined> {
    assertKey(key);
    const current = await this.readCurrent(key);
    return current?.bytes === undefined ? undefined : { ...meta(current.snap.header), body: current.bytes };
  }

  /**
   * Read-modify-write: reads the current body, calls fn, and writes its result only if the key is
   * still at the version read (and the ratchet holds); on a version conflict, reads and calls fn again.
   */
  async update(
    key: string,
    fn: (old: S3Bytes | undefined) => S3Body | Promise<S3Body>,
    options: S3UpdateOptions,
  ): Promise<S3PutResult> {
    assertKey(key);
    if (typeof fn !== "function") throw new TypeError("update needs a function (old) => new body");
    const o = writeOptions(options);
    assertContentType(o.contentType);
    const attempts = o.maxAttempts ?? this.options.maxAttempts;
    for (let attempt = 0; attempt < attempts; attempt++) {
      const current = await this.readCurrent(key);
      const highest = highestFor(current?.snap.header, o.fence.resource);
      // A stale holder learns it before computing anything.
      if (highest !== undefined && o.fence.token < highest) throw new StaleTokenError(o.fence.resource, o.fence.token, highest);
      const old = current?.bytes === undefined ? undefined : { ...meta(current.snap.header), body: current.bytes };
      const next = await fn(old);
      assertBody(next);
      try {
        const version = current === null ? null : current.snap.header.writeId;
        return await this.commit(key, o.fence, this.content(toPayload(next), undefined), version, o.contentType ?? old?.contentType);
      } catch (err) {
        if (!(err instanceof VersionMismatchError)) throw err;
      }
    }
    throw new Error(`update ${JSON.stringify(key)} gave up after ${attempts} attempts: the key kept changing under it`);
  }

  /** Waits for the background deletion of superseded data objects. */
  async flush(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }

  private content(payload: Buffer | Readable, length: number | undefined): Content {
    if (Buffer.isBuffer(payload) && payload.length <= this.options.inlineLimit) return { kind: "inline", bytes: payload };
    return { kind: "object", payload, length };
  }

  /**
   * One fenced write. ifVersion: undefined = any version, null = the key must be absent (internal).
   * The manifest CAS is the single request that decides; everything before it only avoids sending
   * a write that is bound to be refused.
   */
  private async commit(key: string, fence: Fence, content: Content, ifVersion: string | null | undefined, contentType: string | undefined): Promise<S3PutResult> {
    const data = content.kind === "object" ? { key: dataKey(this.prefix, key, newId()), content } : undefined;
    let uploading: Promise<void> | undefined;
    const upload = (): Promise<void> | undefined =>
      data === undefined
        ? undefined
        : (uploading ??= uploadData(this.client, this.bucket, data.key, data.content.payload, {
            contentType,
            contentLength: data.content.length,
            partSize: this.options.partSize,
          }));
    // The manifest an ambiguous attempt was sent against, while it is still current: until the
    // manifest moves on, that attempt may land late, so our data object must not be deleted.
    let inFlightTarget: string | null | undefined;
    try {
      const fenceRead = this.options.checkResourceFence ? this.readFence(fence.resource) : Promise.resolve(undefined);
      const cached = this.cache.get(key);
      // A key this store has not seen is assumed absent: the write goes out as a create, and if the
      // key exists the create fails and the loop below reads it; a new key then costs one request.
      // Only a stream (sent once, never for nothing) and an ifVersion (needs the version) read first.
      const unseenNeedsRead = typeof ifVersion === "string" || (content.kind === "object" && !Buffer.isBuffer(content.payload));
      const readFirst = cached === undefined ? unseenNeedsRead : cached.readFirst > 0;
      if (cached !== undefined && cached.readFirst > 0) cached.readFirst--;
      const manifestRead = readFirst ? this.readManifest(key).then((m) => m?.snap ?? null) : Promise.resolve(cached?.snap ?? null);
      // Bytes in memory upload while the checks run; a stream waits for them, so a stale writer never sends it.
      if (data !== undefined && Buffer.isBuffer(data.content.payload)) upload()?.catch(() => undefined);
      const [fenceSnap, first] = await Promise.all([fenceRead, manifestRead]);

      if (fenceSnap != null && fence.token < fenceSnap.token) throw new StaleTokenError(fence.resource, fence.token, fenceSnap.token);
      let snap = first;
      let problem = refusal(key, fence, snap, ifVersion);
      if (problem !== undefined && !readFirst) {
        // What we remembered may be old; only the current manifest can refuse a write.
        snap = (await this.readManifest(key))?.snap ?? null;
        problem = refusal(key, fence, snap, ifVersion);
      }
      if (problem !== undefined) throw problem;
      if (fenceSnap !== undefined && (fenceSnap === null || fence.token > fenceSnap.token)) await this.raiseFence(fence, fenceSnap);
      await upload();

      const target = manifestKey(this.prefix, key);
      const replaced = new Map<string, Snapshot | null>();
      const body: ManifestHeader["body"] =
        content.kind === "inline" ? { kind: "inline", size: content.bytes.length } : data !== undefined ? { kind: "object", dataKey: data.key } : { kind: "tombstone" };
      for (let attempt = 1; ; attempt++) {
        const header = nextHeader(snap?.header, key, fence, newId(), body, content.kind === "tombstone" ? undefined : contentType);
        replaced.set(header.writeId, snap);
        const outcome = await this.objects.write(target, encodeManifest(header, content.kind === "inline" ? content.bytes : undefined), condition(snap));
        if (outcome.ok) return this.accepted(key, { etag: outcome.etag, header }, snap, fence);
        if (outcome.failure === "fatal") throw outcome.error;
        if (outcome.failure === "ambiguous") inFlightTarget = snap?.etag ?? null;
        // A first failure is usually a remembered manifest gone stale; repeated ones are contention.
        // Pause before reading, not after: the next swap must go out on a manifest read just before.
        if (attempt > 1) {
          this.contended(key);
          await contentionPause(attempt);
        }
        // Whatever went wrong, the manifest itself says whether one of our attempts landed.
        const current = (await this.readManifest(key))?.snap ?? null;
        // A manifest never comes back once replaced, so an attempt against a replaced one can never land.
        if (inFlightTarget !== undefined && inFlightTarget !== (current?.etag ?? null)) inFlightTarget = undefined;
        if (current !== null && replaced.has(current.header.writeId)) {
          return this.accepted(key, current, replaced.get(current.header.writeId) ?? null, fence);
        }
        if (outcome.failure === "precondition" && snap !== null && current?.etag === snap.etag && !this.objects.noteRefusedOwnEtag()) {
          throw refusedOwnEtag(target);
        }
        if (attempt >= this.options.maxAttempts) throw new Error(`put ${JSON.stringify(key)} gave up after ${attempt} conflicting writes`);
        snap = current;
        const refused = refusal(key, fence, snap, ifVersion);
        if (refused !== undefined) throw refused;
      }
    } catch (err) {
      // Our data object is an orphan unless a manifest we sent may still point at it.
      if (uploading !== undefined && data !== undefined && inFlightTarget === undefined) {
        await uploading.catch(() => undefined);
        await this.objects.remove(data.key).catch(() => undefined);
      }
      throw err;
    }
  }

  private accepted(key: string, snap: Snapshot, replaced: Snapshot | null, fence: Fence): S3PutResult {
    this.remember(key, snap);
    const old = replaced?.header.body;
    // Nothing points at the replaced body any more, and no manifest can come back to it (no ABA).
    if (old?.kind === "object") {
      const deletion: Promise<void> = this.objects
        .remove(old.dataKey)
        .catch(() => undefined)
        .finally(() => this.pending.delete(deletion));
      this.pending.add(deletion);
    }
    return { version: snap.header.writeId, token: fence.token };
  }

  /** CAS loop on the resource's fence object. known: undefined = not read yet, null = known absent. */
  private async raiseFence(fence: Fence, known: FenceSnapshot | null | undefined): Promise<void> {
    const target = fenceKey(this.prefix, fence.resource);
    let snap = known === undefined ? await this.readFence(fence.resource) : known;
    for (let attempt = 1; ; attempt++) {
      if (snap !== null && fence.token < snap.token) throw new StaleTokenError(fence.resource, fence.token, snap.token);
      if (snap !== null && snap.token >= fence.token) return; // already at this token
      const outcome = await this.objects.write(target, encodeFence(fence.resource, fence.token), condition(snap));
      if (outcome.ok) return;
      if (outcome.failure === "fatal") throw outcome.error;
      const current = await this.readFence(fence.resource);
      if (outcome.failure === "precondition" && snap !== null && current?.etag === snap.etag && !this.objects.noteRefusedOwnEtag()) {
        throw refusedOwnEtag(target);
      }
      if (attempt >= this.options.maxAttempts) throw new Error(`register ${JSON.stringify(fence.resource)} gave up after ${attempt} conflicting writes`);
      snap = current;
    }
  }

  private remember(key: string, snap: Snapshot | null): void {
    const readFirst = this.cache.get(key)?.readFirst ?? 0;
    this.cache.delete(key); // re-insert: Map order is the LRU order
    this.cache.set(key, { snap, readFirst });
    if (this.cache.size > CACHE_ENTRIES) {
      const oldest = this.cache.keys().next();
      if (oldest.done !== true) this.cache.delete(oldest.value);
    }
  }

  private contended(key: string): void {
    const entry = this.cache.get(key);
    if (entry !== undefined) entry.readFirst = CONTENDED_READ_FIRST;
  }

  private async readManifest(key: string): Promise<{ snap: Snapshot; inline: Buffer | undefined } | null> {
    const stored = await this.objects.read(manifestKey(this.prefix, key));
    if (stored === undefined) {
      this.remember(key, null);
      return null;
    }
    const { header, inline } = decodeManifest(key, stored.body);
    const snap = { etag: stored.etag, header };
    this.remember(key, snap);
    return { snap, inline };
  }

  /** The current manifest and its body read whole (bytes undefined for a tombstone); null if absent. */
  private async readCurrent(key: string): Promise<{ snap: Snapshot; bytes: Buffer | undefined } | null> {
    for (let attempt = 0; attempt < this.options.maxAttempts; attempt++) {
      const found = await this.readManifest(key);
      if (found === null) return null;
      const { body } = found.snap.header;
      if (body.kind !== "object") return { snap: found.snap, bytes: body.kind === "inline" ? (found.inline ?? Buffer.alloc(0)) : undefined };
      const data = await openData(this.client, this.bucket, body.dataKey);
      if (data !== undefined) return { snap: found.snap, bytes: await readAll(data.body) };
    }
    throw new Error(`read ${JSON.stringify(key)}: the key changed ${this.options.maxAttempts} times while it was being read`);
  }

  private async readFence(resource: string): Promise<FenceSnapshot | null> {
    const stored = await this.objects.read(fenceKey(this.prefix, resource));
    return stored === undefined ? null : { etag: stored.etag, token: decodeFence(resource, stored.body) };
  }
}

function condition(snap: { etag: string } | null): Condition {
  return snap === null ? { ifNoneMatch: true } : { ifMatch: snap.etag };
}

function meta(header: ManifestHeader): S3Meta {
  return { version: header.writeId, token: BigInt(header.token), resource: header.resource, contentType: header.contentType };
}

/** Why the current manifest refuses this write, if it does: the ratchet first, then the caller's version. */
function refusal(key: string, fence: Fence, snap: Snapshot | null, ifVersion: string | null | undefined): Error | undefined {
  const highest = highestFor(snap?.header, fence.resource);
  if (highest !== undefined && fence.token < highest) return new StaleTokenError(fence.resource, fence.token, highest);
  if (ifVersion === undefined) return undefined;
  const actual = snap?.header.writeId;
  if (ifVersion === null ? snap === null : actual === ifVersion) return undefined;
  const visible = snap !== null && snap.header.body.kind !== "tombstone" ? actual : undefined;
  return new VersionMismatchError(key, ifVersion ?? "(absent)", visible);
}

/**
 * Writers that lost a race retry at once against the new manifest; a short random pause (up to
 * 2^attempt ms, at most 50) keeps them from colliding again in lockstep. On radosgw, collisions are
 * what trigger its 500s and its occasional stalls of a few hundred milliseconds.
 */
function contentionPause(attempt: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(2 ** attempt, 50)));
}

function refusedOwnEtag(key: string): Error {
  return new Error(`the S3 backend refused If-Match with ${key}'s current ETag in both quoted and unquoted form; run verify() to diagnose`);
}
