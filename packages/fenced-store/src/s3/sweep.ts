import {
  AbortMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  type _Object,
  type MultipartUpload,
} from "@aws-sdk/client-s3";
import { refusesDeleteObjects } from "./deletions.js";
import { isAbsent, withinDeadline } from "./failures.js";
import type { S3Io } from "./io.js";
import { dataPrefix, isProbe, keyOfData, manifestKey, probeKeyPrefix, targetOf } from "../cas/layout.js";
import { decodeManifest, judgeData, type DataVerdict, type ManifestHeader } from "../cas/manifest.js";
import type { CheckedSweepOptions } from "./options.js";
import { Count, type S3SweepProgress, type S3SweepReport } from "./sweep-report.js";

export type { S3SweepOptions, S3SweepProgress, S3SweepReport } from "./sweep-report.js";

/**
 * The sweeper: deletes the data objects that no manifest names and none can come to name — orphans
 * of writers that died between their upload and their manifest PUT, or before their cleanup — and
 * aborts the incomplete multipart uploads of such objects (PROTOCOL.md, "S3", "Data objects and cleanup").
 *
 * INVARIANT: a data object is deleted, and an upload aborted, only after its key's manifest, read
 * AFTER a listing showed it, says that nothing can name it (judgeData: "orphan", the writer's own
 * rule). A manifest read earlier could predate the object's own target and condemn the body of an
 * attempt that can still land. Only names of exactly the store's shape are judged (keyOfData,
 * targetOf); an "unexplained" verdict — no manifest, yet a target that is a writeId — is kept.
 *
 * No age is needed for safety (minAgeMs: 0 is safe): the object's target existed before the object,
 * so before that read; a manifest that is neither the target nor names the object proves the target
 * replaced for good (ETags never repeat, manifests are never deleted), and a transfer carries over only
 * a body its current manifest names. Nothing can name the object again, however long its writer, or
 * the sweep itself, pauses before its next request.
 */

/**
 * The least age of a verify() probe the sweep deletes, whatever minAgeMs is. A probe's age is its
 * server-side LastModified measured against the sweeper's clock: a sweeper clock ahead of the
 * server's by more than the bound would delete a probe while its verify() still runs, failing it
 * (liveness only). An hour absorbs any skew NTP leaves, and probes are few and tiny.
 */
const PROBE_MIN_AGE_MS = 3_600_000;

/** Keys per DeleteObjects request (S3 accepts up to 1,000): a page's deletions spread over `concurrency` requests. */
const DELETE_BATCH = 250;

interface Listed {
  readonly name: string;
  readonly size: number;
}

/** One sweep of one store's prefix. Every request is bounded by the store's timeoutMs and the caller's signal. */
export class Sweep {
  private readonly scanned = new Count();
  private readonly deleted = new Count();
  private readonly named = new Count();
  private readonly young = new Count();
  private readonly unrecognised = new Count();
  private readonly uploads = { scanned: 0, aborted: 0 };
  private readonly uploadsKept = { named: 0, young: 0, unrecognised: 0 };
  private pages = 0;
  /** The backend refused DeleteObjects itself: one DeleteObject per object from then on. */
  private batchRefused = false;

  constructor(
    private readonly io: S3Io,
    private readonly o: CheckedSweepOptions<S3SweepProgress>,
  ) {}

  async run(): Promise<S3SweepReport> {
    await this.objects(dataPrefix(this.io.options.prefix), "data");
    await this.objects(probeKeyPrefix(this.io.options.prefix), "probes");
    await this.abortUploads();
    return this.report();
  }

  report(): S3SweepReport {
    const { scanned, deleted, named, young, unrecognised } = this;
    const kept = { objects: scanned.objects - deleted.objects, bytes: scanned.bytes - deleted.bytes };
    return {
      dryRun: this.o.dryRun,
      minAgeMs: this.o.minAgeMs,
      scanned: scanned.value,
      deleted: deleted.value,
      kept,
      keptBecause: { named: named.value, young: young.value, unrecognised: unrecognised.value },
      uploads: { ...this.uploads, kept: { ...this.uploadsKept } },
    };
  }

  private progress(phase: S3SweepProgress["phase"]): void {
    this.pages++;
    this.o.onProgress?.({ ...this.report(), phase, pages: this.pages });
  }

  /** Sends one request within its own deadline (timeoutMs, and the caller's signal); a failure is thrown typed. */
  private async request<T>(key: string | undefined, send: (signal: AbortSignal) => Promise<T>): Promise<T> {
    return withinDeadline(
      this.io.options.timeoutMs,
      this.o.signal,
      { operation: "sweep", key, bucket: this.io.options.bucket },
      (deadline) => send(deadline.signal),
    );
  }

  /** Whether an object (or upload) last modified (initiated) then is too young to touch. */
  private isYoung(at: Date | undefined, minAgeMs = this.o.minAgeMs): boolean {
    if (minAgeMs === 0) return false;
    return at === undefined || Date.now() - at.getTime() < minAgeMs;
  }

  /** Lists everything under `folder`, one page at a time, and deals with each page before the next is asked for. */
  private async objects(folder: string, phase: "data" | "probes"): Promise<void> {
    const { client, options } = this.io;
    let token: string | undefined;
    do {
      const input = { Bucket: options.bucket, Prefix: folder, MaxKeys: this.o.pageSize, ContinuationToken: token };
      const page = await this.request(undefined, (signal) => client.send(new ListObjectsV2Command(input), { abortSignal: signal }));
      token = page.IsTruncated === true ? page.NextContinuationToken : undefined;
      if (page.IsTruncated === true && token === undefined)
        throw new Error(`ListObjectsV2 of ${folder} was truncated without a continuation token`);
      const listed = page.Contents ?? [];
      await (phase === "data" ? this.dataPage(listed) : this.probePage(listed));
      this.progress(phase);
    } while (token !== undefined);
  }

  /**
   * Judges one page of data objects. The page's listing has answered: every object on it was seen to
   * exist, and each key's manifest is read only now (the INVARIANT). Its key is parsed from its name
   * (keyOfData: up to the last '/'), so a key `a/b`'s objects are judged by `a/b`'s manifest, never by `a`'s.
   */
  private async dataPage(listed: readonly _Object[]): Promise<void> {
    const byKey = new Map<string, Listed[]>();
    for (const object of listed) {
      const name = object.Key ?? "";
      const size = object.Size ?? 0;
      this.scanned.add(size);
      const key = keyOfData(this.io.options.prefix, name);
      // A format /1 name records no target: whether an attempt of a /1 writer still runs is unknown.
      if (key === undefined || targetOf(name) === undefined) this.unrecognised.add(size);
      else if (this.isYoung(object.LastModified)) this.young.add(size);
      else add(byKey, key, { name, size });
    }
    const dead: Listed[] = [];
    await this.judge(byKey, (object, verdict) => {
      if (verdict === "named") this.named.add(object.size);
      else if (verdict === "unexplained") this.unrecognised.add(object.size);
      else dead.push(object);
    });
    await this.remove(dead);
  }

  /**
   * Reads each key's manifest — only now, after the listing that showed its candidates (the
   * INVARIANT) — and hands every candidate of the key its verdict, in order.
   */
  private async judge<T extends { readonly name: string }>(
    byKey: ReadonlyMap<string, readonly T[]>,
    decide: (candidate: T, verdict: DataVerdict) => void | Promise<void>,
  ): Promise<void> {
    await this.limited([...byKey], async ([key, candidates]) => {
      const current = await this.readManifest(key);
      for (const candidate of candidates) await decide(candidate, judgeData(candidate.name, current));
    });
  }

  /**
   * verify()'s probe objects, left behind when the process died during a verify(). Nothing reads a
   * probe but the verify() that wrote it, which is over once its deadline (timeoutMs) has passed:
   * deleting one earlier could only fail a verify() in progress, never touch data. Kept for at least
   * PROBE_MIN_AGE_MS too, whatever minAgeMs is: the age is measured against the sweeper's clock.
   */
  private async probePage(listed: readonly _Object[]): Promise<void> {
    const dead: Listed[] = [];
    const minAgeMs = Math.max(this.o.minAgeMs, this.io.options.timeoutMs, PROBE_MIN_AGE_MS);
    for (const object of listed) {
      const name = object.Key ?? "";
      const size = object.Size ?? 0;
      this.scanned.add(size);
      if (!isProbe(this.io.options.prefix, name)) this.unrecognised.add(size);
      else if (this.isYoung(object.LastModified, minAgeMs)) this.young.add(size);
      else dead.push({ name, size });
    }
    await this.remove(dead);
  }

  /** The key's manifest as it is now (null: none); CorruptStateError if it is not one the store wrote. */
  private async readManifest(key: string): Promise<ManifestHeader | null> {
    const stored = await this.request(key, (signal) => this.io.objects.read(manifestKey(this.io.options.prefix, key), signal));
    return stored === undefined ? null : decodeManifest(key, stored.body).header;
  }

  /**
   * Deletes what was judged dead: DeleteObjects in batches, or one DeleteObject each where the
   * backend refuses DeleteObjects (deletions.ts's rule). Deferring a deletion is safe: an object
   * that no manifest can come to name never can again.
   */
  private async remove(dead: readonly Listed[]): Promise<void> {
    if (this.o.dryRun) {
      for (const object of dead) this.deleted.add(object.size);
      return;
    }
    const batches: Listed[][] = [];
    for (let i = 0; i < dead.length; i += DELETE_BATCH) batches.push(dead.slice(i, i + DELETE_BATCH));
    const left: Listed[] = [];
    await this.limited(batches, async (batch) => {
      left.push(...(await this.deleteBatch(batch)));
    });
    await this.limited(left, (object) => this.deleteOne(object));
  }

  /** One DeleteObjects; returns the objects it did not delete (to be deleted one by one). */
  private async deleteBatch(batch: readonly Listed[]): Promise<readonly Listed[]> {
    if (batch.length < 2 || this.batchRefused) return batch;
    const { client, options } = this.io;
    const Delete = { Objects: batch.map((o) => ({ Key: o.name })), Quiet: true };
    const answer = await this.request(undefined, async (signal) => {
      try {
        return await client.send(new DeleteObjectsCommand({ Bucket: options.bucket, Delete }), { abortSignal: signal });
      } catch (err) {
        if (signal.aborted) throw err;
        // A backend without DeleteObjects gets single deletions from now on; after a transient failure, this batch does.
        if (refusesDeleteObjects(err)) this.batchRefused = true;
        return undefined;
      }
    });
    if (answer === undefined) return batch;
    // Quiet: the answer lists only the keys that failed; each gets a DeleteObject, whose failure is thrown.
    const failed = new Set((answer.Errors ?? []).map((e) => e.Key ?? ""));
    for (const object of batch) if (!failed.has(object.name)) this.deleted.add(object.size);
    return batch.filter((o) => failed.has(o.name));
  }

  private async deleteOne(object: Listed): Promise<void> {
    const { client, options } = this.io;
    await this.request(object.name, (signal) =>
      client.send(new DeleteObjectCommand({ Bucket: options.bucket, Key: object.name }), { abortSignal: signal }),
    );
    this.deleted.add(object.size);
  }

  /**
   * Aborts the incomplete multipart uploads under `<prefix>data/` (where every upload of the store
   * goes; with an empty prefix, listing the whole bucket would take in other writers' uploads) that
   * no manifest can come to name: an upload's Key is its data object's name, judged as the object is.
   *
   * Age alone never makes an abort safe. On radosgw (16.2) an AbortMultipartUpload processed while
   * the writer's CompleteMultipartUpload is lets Complete answer 200 (the abort answers 200 or 404)
   * yet queues the parts for garbage collection: the object reads back until radosgw's GC runs
   * (rgw_gc_obj_min_wait, 2 h by default) and is gone after. The writer, told its upload completed,
   * sends the manifest PUT; it lands, the write is acknowledged, and its body is lost later. A
   * stream's upload lasts as long as the caller's stream does, so no age protects it.
   *
   * With the rule, whichever way that race turns out loses nothing acknowledged: the upload's target
   * existed before it was initiated, so before the listing and the manifest read; an "orphan" verdict
   * proves that target replaced for good (or, for a create, some manifest there) and that no manifest
   * names the object — none ever will, whether the object never exists, exists, or exists until GC.
   * Its writer's attempt fails its manifest PUT; the next attempt copies the object under a name of
   * its own (a copy made before GC runs is whole: radosgw's copy holds its own reference to the
   * stored parts, measured), or finds it gone. An upload whose target is current, or a create's on
   * a key with no manifest, is kept however old: its writer may be sending it still.
   */
  private async abortUploads(): Promise<void> {
    const { client, options } = this.io;
    let markers: { KeyMarker?: string; UploadIdMarker?: string } = {};
    for (;;) {
      const input = { Bucket: options.bucket, Prefix: dataPrefix(options.prefix), MaxUploads: this.o.pageSize, ...markers };
      const page = await this.request(undefined, (signal) => client.send(new ListMultipartUploadsCommand(input), { abortSignal: signal }));
      await this.uploadPage(page.Uploads ?? []);
      this.progress("uploads");
      if (page.IsTruncated !== true) return;
      if (page.NextKeyMarker === undefined) throw new Error("ListMultipartUploads was truncated without a next marker");
      markers = {
        KeyMarker: page.NextKeyMarker,
        ...(page.NextUploadIdMarker === undefined ? {} : { UploadIdMarker: page.NextUploadIdMarker }),
      };
    }
  }

  /** Judges one page of uploads as dataPage() judges objects: each key's manifest read after the listing answered. */
  private async uploadPage(listed: readonly MultipartUpload[]): Promise<void> {
    const byKey = new Map<string, { name: string; uploadId: string }[]>();
    for (const upload of listed) {
      const name = upload.Key ?? "";
      this.uploads.scanned++;
      const key = keyOfData(this.io.options.prefix, name);
      if (key === undefined || targetOf(name) === undefined || upload.UploadId === undefined) this.uploadsKept.unrecognised++;
      else if (this.isYoung(upload.Initiated)) this.uploadsKept.young++;
      else add(byKey, key, { name, uploadId: upload.UploadId });
    }
    await this.judge(byKey, async (upload, verdict) => {
      if (verdict === "named") this.uploadsKept.named++;
      else if (verdict === "unexplained") this.uploadsKept.unrecognised++;
      else if (this.o.dryRun || (await this.abortUpload(upload.name, upload.uploadId))) this.uploads.aborted++;
    });
  }

  /** False if the upload is gone already: it completed, or was aborted by its writer or another sweep. */
  private async abortUpload(key: string, uploadId: string): Promise<boolean> {
    const { client, options } = this.io;
    return this.request(key, async (signal) => {
      try {
        await client.send(new AbortMultipartUploadCommand({ Bucket: options.bucket, Key: key, UploadId: uploadId }), {
          abortSignal: signal,
        });
        return true;
      } catch (err) {
        if (isAbsent(err)) return false;
        throw err;
      }
    });
  }

  /**
   * Runs `work` on every item, at most `concurrency` at a time. After a failure no new item starts,
   * and what is running is waited for before the first failure is thrown: nothing outlives the sweep.
   */
  private async limited<T>(items: readonly T[], work: (item: T) => Promise<void>): Promise<void> {
    let next = 0;
    let failure: { error: unknown } | undefined;
    const worker = async (): Promise<void> => {
      while (failure === undefined && next < items.length) {
        const item = items[next++] as T;
        try {
          await work(item);
        } catch (error) {
          failure ??= { error };
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.o.concurrency, items.length) }, worker));
    if (failure !== undefined) throw failure.error;
  }
}

function add<T>(byKey: Map<string, T[]>, key: string, item: T): void {
  const items = byKey.get(key);
  if (items === undefined) byKey.set(key, [item]);
  else items.push(item);
}
