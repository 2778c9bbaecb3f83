import type { Readable } from "node:stream";
import { InvalidArgumentError } from "@fenced/fence";
import { sendOptions } from "./conditional.js";
import { requestSignal, type Deadline } from "../deadline.js";
import { codeOf, statusOf } from "../aws/answers.js";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  HeadObjectCommand,
  PutObjectCommand,
  UploadPartCommand,
  type CompletedPart,
  type S3Client,
} from "@aws-sdk/client-s3";

export interface MultipartOptions {
  readonly contentType: string | undefined;
  readonly partSize: number;
  /** Parts uploading at once. Memory held: (concurrency + 1) × partSize, whatever the body's length. */
  readonly concurrency: number;
  /** The write's deadline: its signal goes with every request; waiting for the stream's bytes does not count. */
  readonly deadline: Deadline;
  /** The bound on aborting an abandoned upload (the deadline may have passed already). */
  readonly timeoutMs: number;
}

/**
 * Streams a body of unknown length to S3 as a multipart upload. Part buffers are allocated once and
 * reused, so memory stays flat at (concurrency + 1) part buffers: reading pauses (backpressure) while
 * every buffer is in flight. Freshly allocated buffers per part would leave the release of that
 * memory to the garbage collector's timing, which lets a long upload's footprint drift far above it.
 * A body that fits in one part is sent as one create-only PUT instead. Returns the bytes stored.
 */
export async function uploadStream(
  client: S3Client,
  bucket: string,
  key: string,
  body: Readable,
  options: MultipartOptions,
): Promise<number> {
  const uploads = new PartUploads(client, bucket, key, options);
  try {
    const { total, last, filled } = await fillParts(body, options.deadline, uploads);
    if (uploads.launched === 0) {
      await putOnce(
        client,
        new PutObjectCommand({
          Bucket: bucket,
          Key: key,
          Body: last.subarray(0, filled),
          ContentLength: filled,
          IfNoneMatch: "*",
          ...contentTypeOf(options),
        }),
        options.deadline.signal,
      );
      return total;
    }
    if (filled > 0) await uploads.send(last, filled);
    await uploads.complete();
    return total;
  } catch (err) {
    body.destroy();
    await uploads.abort();
    throw err;
  }
}

const contentTypeOf = (options: MultipartOptions): { ContentType?: string } =>
  options.contentType === undefined ? {} : { ContentType: options.contentType };

/**
 * Copies the body's bytes into part buffers, handing each full one to `uploads` as a part. Returns the
 * bytes read, and the last buffer with the `filled` bytes no part has taken yet.
 */
async function fillParts(
  body: Readable,
  deadline: Deadline,
  uploads: PartUploads,
): Promise<{ total: number; last: Buffer; filled: number }> {
  const { partSize } = uploads;
  let current = uploads.take();
  let filled = 0;
  let total = 0;
  for await (const bytes of chunksOf(body, deadline)) {
    total += bytes.length;
    for (let offset = 0; offset < bytes.length;) {
      const n = Math.min(bytes.length - offset, partSize - filled);
      bytes.copy(current, filled, offset, offset + n);
      filled += n;
      offset += n;
      if (filled === partSize) {
        await uploads.send(current, filled);
        current = uploads.take();
        filled = 0;
      }
    }
  }
  return { total, last: current, filled };
}

/**
 * The parts of one multipart upload, created with its first part: at most `concurrency` in flight,
 * each part's buffer free for the next once S3 has stored it. The first failure of a part is kept,
 * and thrown by the next send() or by complete().
 */
class PartUploads {
  /** Parts handed to send() so far: 0 while the body fits in one part. */
  launched = 0;
  readonly partSize: number;
  private readonly free: Buffer[] = [];
  private readonly parts: CompletedPart[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private readonly sendOptions: { abortSignal?: AbortSignal };
  private uploadId: string | undefined;
  private failure: { error: unknown } | undefined;

  constructor(
    private readonly client: S3Client,
    private readonly bucket: string,
    private readonly key: string,
    private readonly options: MultipartOptions,
  ) {
    this.partSize = options.partSize;
    this.sendOptions = sendOptions(options.deadline.signal);
  }

  /** A part buffer: one a stored part has freed, or a new one. */
  take(): Buffer {
    return this.free.pop() ?? Buffer.allocUnsafe(this.partSize);
  }

  /** Starts the upload of the next part, once fewer than `concurrency` are in flight. */
  async send(buffer: Buffer, length: number): Promise<void> {
    while (this.inFlight.size >= this.options.concurrency) await Promise.race(this.inFlight);
    if (this.failure !== undefined) throw this.failure.error;
    if (this.uploadId === undefined) this.uploadId = await this.create();
    const partNumber = ++this.launched;
    const upload = this.client
      .send(
        new UploadPartCommand({
          Bucket: this.bucket,
          Key: this.key,
          UploadId: this.uploadId,
          PartNumber: partNumber,
          Body: buffer.subarray(0, length),
          ContentLength: length,
        }),
        this.sendOptions,
      )
      .then(
        (res) => {
          this.parts.push({ PartNumber: partNumber, ETag: res.ETag });
          this.free.push(buffer);
        },
        (error: unknown) => {
          this.failure ??= { error };
        },
      )
      .finally(() => this.inFlight.delete(upload));
    this.inFlight.add(upload);
  }

  /** Waits for every part, then completes the upload with them, in part order. */
  async complete(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.race(this.inFlight);
    if (this.failure !== undefined) throw this.failure.error;
    this.parts.sort((a, b) => (a.PartNumber ?? 0) - (b.PartNumber ?? 0));
    try {
      await this.client.send(
        new CompleteMultipartUploadCommand({
          Bucket: this.bucket,
          Key: this.key,
          UploadId: this.uploadId,
          MultipartUpload: { Parts: this.parts },
        }),
        this.sendOptions,
      );
    } catch (err) {
      // The SDK sends a Complete whose answer was lost again; a backend that forgets an upload once
      // completed answers that retry NoSuchUpload. The key is this write's own, a name no other
      // request creates (layout.ts, dataKey): if it exists now, it is this upload, completed.
      if (codeOf(err) !== "NoSuchUpload" || !(await this.exists())) throw err;
    }
  }

  private async exists(): Promise<boolean> {
    try {
      await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: this.key }), this.sendOptions);
      return true;
    } catch (err) {
      if (statusOf(err) === 404) return false;
      throw err;
    }
  }

  /** After a failure: waits for the parts in flight, then aborts the upload, if one was created. */
  async abort(): Promise<void> {
    await Promise.allSettled(this.inFlight);
    // Parts of an abandoned upload are stored (and billed) until aborted.
    if (this.uploadId !== undefined)
      await this.client
        .send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: this.key, UploadId: this.uploadId }), {
          abortSignal: requestSignal(this.options.timeoutMs),
        })
        .catch(() => undefined);
  }

  private async create(): Promise<string> {
    const created = await this.client.send(
      new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: this.key, ...contentTypeOf(this.options) }),
      this.sendOptions,
    );
    if (created.UploadId === undefined) throw new Error(`CreateMultipartUpload for ${this.key} returned no UploadId`);
    return created.UploadId;
  }
}

/**
 * A create-only PUT of a data object. Its name is unique to one write, so "already exists" (412) can
 * only be an earlier attempt of this same request that the SDK retried after losing its response.
 */
export async function putOnce(client: S3Client, command: PutObjectCommand, signal: AbortSignal | undefined): Promise<void> {
  try {
    await client.send(command, sendOptions(signal));
  } catch (err) {
    if (statusOf(err) !== 412) throw err;
  }
}

/**
 * The chunks of a byte stream as they were pushed, one at a time, pausing the stream between them.
 * Async iteration of a Readable calls read(), which concatenates everything buffered into a fresh
 * copy; over a long upload those short-lived copies, released only when the collector runs,
 * doubled the memory the part buffers take.
 */
export async function* chunksOf(stream: Readable, deadline: Deadline): AsyncGenerator<Buffer> {
  const { signal } = deadline;
  const queue: Buffer[] = [];
  let ended = false;
  let error: { error: unknown } | undefined;
  let wake: (() => void) | undefined;
  const onData = (chunk: unknown): void => {
    stream.pause();
    if (Buffer.isBuffer(chunk)) queue.push(chunk);
    else if (chunk instanceof Uint8Array) queue.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    else if (typeof chunk === "string") queue.push(Buffer.from(chunk, "utf8"));
    else
      error ??= {
        error: new InvalidArgumentError("body", `the stream yielded a ${chunk === null ? "null" : typeof chunk}, not bytes or a string`),
      };
    wake?.();
  };
  const onEnd = (): void => {
    ended = true;
    wake?.();
  };
  const onError = (err: unknown): void => {
    error ??= { error: err };
    wake?.();
  };
  // An abort stops the reading too: a stream that waits for data would otherwise hold the upload open.
  const onAbort = (): void => onError(signal.reason);
  signal.addEventListener("abort", onAbort, { once: true });
  if (signal.aborted) onAbort();
  stream.on("data", onData).once("end", onEnd).once("error", onError);
  try {
    for (;;) {
      const next = queue.shift();
      if (next !== undefined) {
        yield next;
        continue;
      }
      if (error !== undefined) throw error.error;
      if (ended) return;
      const woken = new Promise<void>((resolve) => (wake = resolve));
      // Waiting for the caller's stream, not for the backend: the deadline's clock stops meanwhile.
      const resume = deadline.suspend();
      stream.resume();
      try {
        await woken;
      } finally {
        resume();
      }
      wake = undefined;
    }
  } finally {
    stream.off("data", onData).off("end", onEnd).off("error", onError);
    signal.removeEventListener("abort", onAbort);
  }
}
