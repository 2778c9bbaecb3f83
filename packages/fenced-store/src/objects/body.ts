import { Readable } from "node:stream";
import { InvalidArgumentError } from "@fenced/fence";
import { CONTROL_CHARACTER } from "@fenced/fence/internal";

/**
 * What every store of the objects family checks of a body and its options before any I/O, and how
 * it reads a stream whole; nothing here knows a backend (S3: ../s3/body.ts; Azure Blob: ../azure-blob/store.ts).
 */

/** What an object store's put() accepts: bytes in memory, or a stream. */
export type ObjectBody = string | Uint8Array | Readable;

export function assertBody(body: unknown, argument = "body"): asserts body is ObjectBody {
  if (typeof body === "string" || body instanceof Uint8Array) return;
  if (body instanceof Readable) {
    // Object mode is allowed (Readable.from([buffer]) is one); its chunks are checked as they come.
    if (body.destroyed || body.readableEnded) throw new InvalidArgumentError(argument, "the stream has already been consumed or destroyed");
    return;
  }
  throw new InvalidArgumentError(
    argument,
    `must be a string, a Uint8Array or a Readable stream, got ${body === null ? "null" : typeof body}`,
  );
}

export function assertContentType(contentType: unknown): asserts contentType is string | undefined {
  if (contentType === undefined) return;
  if (typeof contentType !== "string") throw new InvalidArgumentError("contentType", "must be a string");
  if (contentType.length === 0 || contentType.length > 256) throw new InvalidArgumentError("contentType", "must be 1 to 256 characters");
  if (CONTROL_CHARACTER.test(contentType)) throw new InvalidArgumentError("contentType", "must not contain control characters");
}

export function assertContentLength(contentLength: unknown, body: ObjectBody): asserts contentLength is number | undefined {
  if (contentLength === undefined) return;
  if (!(body instanceof Readable))
    throw new InvalidArgumentError("contentLength", "is only for stream bodies (the length of bytes in memory is known)");
  if (typeof contentLength !== "number" || !Number.isSafeInteger(contentLength) || contentLength < 0) {
    throw new InvalidArgumentError("contentLength", "must be a non-negative safe integer");
  }
}

/** Bytes in memory as a Buffer (no copy for a Uint8Array); streams stay streams. */
export function toPayload(body: ObjectBody): Buffer | Readable {
  if (typeof body === "string") return Buffer.from(body, "utf8");
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  return body;
}

export async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}
