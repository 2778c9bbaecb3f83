import type { Readable } from "node:stream";
import { uploadData } from "./body.js";
import { OutcomeUnknownError } from "../errors.js";
import { copyData } from "./copy.js";
import type { Deadline } from "../deadline.js";
import type { S3Io } from "./io.js";
import { dataKey, newId } from "../cas/layout.js";
import { mayBeNamed, type ManifestHeader } from "../cas/manifest.js";

interface DataObject {
  readonly key: string;
  /** The writeId of the manifest the attempt naming it is (to be) sent against; null: a create. */
  readonly target: string | null;
  /** Settles when the object exists (or its upload failed): its size. */
  readonly ready: Promise<number>;
  settled: boolean;
  /** The manifest attempt naming it, once sent: only then may a manifest ever name it. */
  attempt: SentAttempt | undefined;
}

/** What the write knows of the attempt that named an object (run.ts, Attempt). */
interface SentAttempt {
  /** False once an answer said it was not applied (throttled, fatal, 412, 409, unsent), or a read proved it never landed. */
  readonly ambiguous: boolean;
}

/**
 * The data objects of one write. Every manifest attempt names a data object of its own, created
 * after the manifest it is sent against was read, and named for it (layout.ts): so no two attempts
 * ever name one object, and whether a manifest can still name an object follows from its name and
 * the key's current manifest (mayBeNamed) — and, to this write, from its attempt's answer. The
 * first is uploaded; later ones are server-side copies of an earlier one (a stream cannot be read
 * twice), or, for bytes in memory, uploaded again if every earlier object is gone.
 */
export class AttemptBodies {
  private readonly made: DataObject[] = [];

  constructor(
    private readonly io: S3Io,
    private readonly key: string,
    private readonly payload: Buffer | Readable,
    private readonly length: number | undefined,
    private readonly contentType: string | undefined,
    /** The write's deadline: its signal bounds every upload and copy; a stream's waits for the caller are not counted. */
    private readonly deadline: Deadline,
  ) {}

  private add(target: string | null, create: (key: string) => Promise<number>): DataObject {
    const key = dataKey(this.io.options.prefix, this.key, target, newId());
    const object: DataObject = { key, target, ready: create(key), settled: false, attempt: undefined };
    object.ready.then(
      () => (object.settled = true),
      () => (object.settled = true),
    );
    this.made.push(object);
    return object;
  }

  private upload(target: string | null): DataObject {
    const { client, options } = this.io;
    return this.add(target, (key) =>
      uploadData(client, options.bucket, key, this.payload, {
        contentType: this.contentType,
        contentLength: this.length,
        partSize: options.partSize,
        deadline: this.deadline,
        timeoutMs: options.timeoutMs,
      }),
    );
  }

  /**
   * Starts uploading bytes in memory for an attempt against `target` while the write's checks run
   * (the target must have been read already, or be null). Streams wait for the checks: a stale
   * writer never sends its stream.
   */
  begin(target: string | null): void {
    if (this.made.length === 0) this.upload(target).ready.catch(() => undefined);
  }

  /**
   * The data object in place for the next attempt against `target`: made for it, named by no
   * attempt yet, and no longer uploading; undefined if there is none (prepare() would wait for I/O).
   */
  inPlace(target: string | null): string | undefined {
    const last = this.made.at(-1);
    return last !== undefined && last.attempt === undefined && last.settled && last.target === target ? last.key : undefined;
  }

  /**
   * A data object for the next attempt, to be sent against `target`: the upload begun for that
   * target, or a new one. If it had to wait for I/O, the object was not in place before (inPlace):
   * a fence read from before then is not current.
   */
  async prepare(target: string | null): Promise<string> {
    const last = this.made.at(-1);
    if (last !== undefined && last.attempt === undefined && last.target === target) {
      await last.ready;
      return last.key;
    }
    if (last === undefined) {
      const first = this.upload(target);
      await first.ready;
      return first.key;
    }
    const size = await last.ready; // an upload that failed fails the write: there is nothing to copy
    const { client, options } = this.io;
    for (const source of [...this.made].reverse()) {
      let copied = false;
      const object = this.add(target, async (key) => {
        copied = await copyData(
          client,
          options.bucket,
          source.key,
          key,
          size,
          this.contentType,
          this.deadline.signal,
          undefined,
          options.timeoutMs,
        );
        return size;
      });
      await object.ready;
      if (copied) return object.key;
      this.made.pop(); // nothing was created under that name
    }
    // Every earlier object is gone: each was named by an attempt that landed and was replaced since
    // (whose writer then deleted it), or was swept once no manifest could name it.
    if (Buffer.isBuffer(this.payload)) {
      const again = this.upload(target);
      await again.ready;
      return again.key;
    }
    // The data object of an earlier attempt is gone: that attempt may have landed and been
    // superseded, and a stream cannot be sent again.
    throw new OutcomeUnknownError("s3", this.key, "put");
  }

  /** `attempt`, naming this object, is being sent. */
  sent(key: string, attempt: SentAttempt): void {
    const object = this.made.find((o) => o.key === key);
    if (object !== undefined) object.attempt = attempt;
  }

  /**
   * Deletes this write's data objects that no manifest can come to name: those no attempt named;
   * those whose attempt was answered "not applied"; and, when the key's current manifest is known
   * (undefined: unknown), those whose attempts can no longer land. Called once the write is over.
   * Anything else is left for the sweeper (PROTOCOL.md, "S3", "Data objects and cleanup").
   */
  async cleanup(current: ManifestHeader | null | undefined): Promise<void> {
    await Promise.all(
      this.made.map(async (object) => {
        await object.ready.catch(() => undefined); // an upload still running would create it after the delete
        if (this.mayStillBeNamed(object, current)) return;
        await this.io.objects.remove(object.key).catch(() => undefined);
      }),
    );
  }

  private mayStillBeNamed(object: DataObject, current: ManifestHeader | null | undefined): boolean {
    // Once an attempt was sent, `current` is known: the landed attempt's own manifest, or one read
    // after the last attempt was sent (write.ts). An attempt that landed although its answer said
    // otherwise (a 412 to a retry of a request that landed) is named by it, or was replaced since.
    if (current?.body.kind === "object" && current.body.dataKey === object.key) return true;
    // Only its own attempt can name an object first (a transfer carries over only a body some
    // manifest names). One never sent, or answered "not applied", never lands: the write is over, so
    // no later attempt of it will copy from the object, and nothing ever names it.
    if (object.attempt === undefined || !object.attempt.ambiguous) return false;
    return current === undefined || mayBeNamed(object.key, current);
  }
}
