import type { Readable } from "node:stream";
import { InvalidArgumentError } from "@fenced/fence";
import { sendOptions } from "./conditional.js";
import { requestSignal, type Deadline } from "../deadline.js";
import { statusOf } from "./failures.js";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
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
  const { partSize, concurrency, deadline } = options;
  const { signal } = deadline;
  const send = sendOptions(signal);
  const contentType = options.contentType === undefined ? {} : { ContentType: options.contentType };
  const free: Buffer[] = [];
  const take = (): Buffer => free.pop() ?? Buffer.allocUnsafe(partSize);
  const parts: CompletedPart[] = [];
  const inFlight = new Set<Promise<void>>();
  let uploadId: string | undefined;
  let launched = 0;
  let total = 0;
  let failure: { error: unknown } | undefined;

  const sendPart = async (buffer: Buffer, length: number): Promise<void> => {
    while (inFlight.size >= concurrency) await Promise.race(inFlight);
    if (failure !== undefined) throw failure.error;
    if (uploadId === undefined) {
      const created = await client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key, ...contentType }), send);
      if (created.UploadId === undefined) throw new Error(`CreateMultipartUpload for ${key} returned no UploadId`);
      uploadId = created.UploadId;
    }
    const partNumber = ++launched;
    const upload = client
      .send(
        new UploadPartCommand({
          Bucket: bucket,
          Key: key,
          UploadId: uploadId,
          PartNumber: partNumber,
          Body: buffer.subarray(0, length),
          ContentLength: length,
        }),
        send,
      )
      .then(
        (res) => {
          parts.push({ PartNumber: partNumber, ETag: res.ETag });
          free.push(buffer);
        },
        (error: unknown) => {
          failure ??= { error };
        },
      )
      .finally(() => inFlight.delete(upload));
    inFlight.add(upload);
  };

  try {
    let current = take();
    let filled = 0;
    for await (const bytes of chunksOf(body, deadline)) {
      total += bytes.length;
      for (let offset = 0; offset < bytes.length;) {
        const n = Math.min(bytes.length - offset, partSize - filled);
        bytes.copy(current, filled, offset, offset + n);
        filled += n;
        offset += n;
        if (filled === partSize) {
          await sendPart(current, filled);
          current = take();
          filled = 0;
        }
      }
    }
    if (launched === 0) {
      await putOnce(
        client,
        new PutObjectCommand({
          Bucket: bucket,
          Key: key,
          Body: current.subarray(0, filled),
          ContentLength: filled,
          IfNoneMatch: "*",
          ...contentType,
        }),
        signal,
      );
      return total;
    }
    if (filled > 0) await sendPart(current, filled);
    while (inFlight.size > 0) await Promise.race(inFlight);
    if (failure !== undefined) throw failure.error;
    parts.sort((a, b) => (a.PartNumber ?? 0) - (b.PartNumber ?? 0));
    await client.send(
      new CompleteMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId: uploadId, MultipartUpload: { Parts: parts } }),
      send,
    );
    return total;
  } catch (err) {
    body.destroy();
    await Promise.allSettled(inFlight);
    // Parts of an abandoned upload are stored (and billed) until aborted.
    if (uploadId !== undefined)
      await client
        .send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId: uploadId }), {
          abortSignal: requestSignal(options.timeoutMs),
        })
        .catch(() => undefined);
    throw err;
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
