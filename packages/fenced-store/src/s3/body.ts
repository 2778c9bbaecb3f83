import { Readable } from "node:stream";
import { GetObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { sendOptions } from "./conditional.js";
import type { Deadline } from "../deadline.js";
import { isAbsent } from "./failures.js";
import { chunksOf, putOnce, uploadStream } from "./multipart.js";
import type { ObjectBody } from "../objects/body.js";
/** What put() accepts: bytes in memory, or a stream that is sent without being buffered whole. */
export type S3Body = ObjectBody;

/** Parts of one stream uploading at once: enough to keep a link busy, few enough to bound memory. */
const PART_CONCURRENCY = 2;

export interface UploadOptions {
  readonly contentType: string | undefined;
  /** Known length of a stream body: one streamed PUT instead of a multipart upload. */
  readonly contentLength: number | undefined;
  /** Multipart part size for streams of unknown length. */
  readonly partSize: number;
  /** The write's deadline: its signal goes with every request; waiting for a stream's bytes does not count. */
  readonly deadline: Deadline;
  /** The bound on aborting an abandoned multipart upload (the deadline may have passed already). */
  readonly timeoutMs: number;
}

/**
 * Writes a data object under a name no other write uses and returns its size. Bytes and streams of
 * known length go in one PUT with If-None-Match: * (data is never overwritten in place); a stream of
 * unknown length goes multipart, holding a few parts in memory, and relies on the unique name alone,
 * because conditions on completing a multipart upload are not portable.
 */
export async function uploadData(
  client: S3Client,
  bucket: string,
  key: string,
  body: Buffer | Readable,
  options: UploadOptions,
): Promise<number> {
  const contentType = options.contentType === undefined ? {} : { ContentType: options.contentType };
  const { deadline } = options;
  if (Buffer.isBuffer(body)) {
    const put = new PutObjectCommand({
      Bucket: bucket,
      Key: key,
      Body: body,
      ContentLength: body.length,
      IfNoneMatch: "*",
      ...contentType,
    });
    await putOnce(client, put, deadline.signal);
    return body.length;
  }
  if (options.contentLength !== undefined) {
    const length = options.contentLength;
    await putStream(
      client,
      new PutObjectCommand({ Bucket: bucket, Key: key, ContentLength: length, IfNoneMatch: "*", ...contentType }),
      body,
      deadline,
    );
    return length;
  }
  return uploadStream(client, bucket, key, body, {
    contentType: options.contentType,
    partSize: options.partSize,
    concurrency: PART_CONCURRENCY,
    deadline,
    timeoutMs: options.timeoutMs,
  });
}

/**
 * A stream of known length in one PUT. It is read through chunksOf, which stops the deadline's clock
 * while the caller's stream has nothing to give: the PUT is bounded by the backend's pace, not by
 * the caller's. A failure of the reading (a chunk that is not bytes, an abort) ends the request at
 * once and is what the write throws: the HTTP handler would otherwise wait for bytes that never come.
 */
async function putStream(client: S3Client, command: PutObjectCommand, body: Readable, deadline: Deadline): Promise<void> {
  const payload = Readable.from(chunksOf(body, deadline), { objectMode: false });
  command.input.Body = payload;
  const request = new AbortController();
  const stop = (): void => request.abort(deadline.signal.reason);
  if (deadline.signal.aborted) stop();
  deadline.signal.addEventListener("abort", stop, { once: true });
  let failure: { error: unknown } | undefined;
  payload.once("error", (error) => {
    failure ??= { error };
    request.abort(error);
  });
  try {
    await putOnce(client, command, request.signal);
  } catch (err) {
    throw failure?.error ?? err;
  } finally {
    deadline.signal.removeEventListener("abort", stop);
    payload.destroy(); // ends the reading: chunksOf lets go of the caller's stream
  }
}

export interface DataObject {
  readonly body: Readable;
  readonly size: number | undefined;
}

/** Opens a data object; undefined when it is gone (superseded and cleaned up since the manifest was read). */
export async function openData(client: S3Client, bucket: string, key: string, signal?: AbortSignal): Promise<DataObject | undefined> {
  try {
    const res = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }), sendOptions(signal));
    if (!(res.Body instanceof Readable)) throw new Error(`GET ${key} did not return a Node.js stream`);
    return { body: res.Body, size: res.ContentLength };
  } catch (err) {
    if (isAbsent(err)) return undefined;
    throw err;
  }
}

/**
 * Makes a body stream that the caller reads after its call returned error out instead of hanging
 * when the backend stops sending: destroyed with `stalled()` once no byte has arrived for `ms` while
 * the stream had room for more (a consumer that does not read holds the bytes back itself, and is
 * not a stall). Needs the HTTP response's socket (Node's IncomingMessage); anything else is left as
 * it is. A stream destroyed with an error emits it only to a listener: never an uncaught error.
 */
export function watchStalls(body: Readable, ms: number, stalled: () => Error): void {
  const response = body as Readable & { socket?: { bytesRead?: unknown } | null; complete?: unknown };
  const socket = response.socket;
  if (socket === null || socket === undefined || typeof socket.bytesRead !== "number") return;
  let seen = socket.bytesRead;
  let since = performance.now();
  const timer = setInterval(
    () => {
      const now = performance.now();
      const read = typeof socket.bytesRead === "number" ? socket.bytesRead : seen;
      // Bytes arrived, or the stream is full (the socket is paused for the reader): not stalled.
      if (read !== seen || body.readableLength >= body.readableHighWaterMark || response.complete === true) {
        seen = read;
        since = now;
        if (response.complete === true) stop();
        return;
      }
      if (now - since >= ms) {
        stop();
        body.destroy(stalled());
      }
    },
    Math.max(25, Math.floor(ms / 4)),
  ).unref();
  const stop = (): void => clearInterval(timer);
  body.once("close", stop).once("end", stop);
}
