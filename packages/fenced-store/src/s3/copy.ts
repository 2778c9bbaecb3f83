import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateMultipartUploadCommand,
  UploadPartCopyCommand,
  type CompletedPart,
  type S3Client,
} from "@aws-sdk/client-s3";
import { sendOptions } from "./conditional.js";
import { requestSignal } from "../deadline.js";
import { isAbsent } from "./failures.js";

/**
 * A server-side copy of a data object under a fresh name: how a write's next manifest attempt gets a
 * data object of its own without sending the body again (a stream cannot be read twice).
 */

export interface CopyLimits {
  /** The largest object one CopyObject may copy (S3: 5 GiB); larger ones are copied part by part. */
  readonly single: number;
  /** Bytes per UploadPartCopy (at least 5 MiB, at most 5 GiB; raised so that 10,000 parts suffice). */
  readonly part: number;
}

const COPY_LIMITS: CopyLimits = { single: 5 * 1024 ** 3, part: 512 * 1024 ** 2 };
const MAX_PARTS = 10_000;

/** The x-amz-copy-source of an object: each key segment URL-encoded, the slashes kept. */
function copySource(bucket: string, key: string): string {
  return `${bucket}/${key.split("/").map(encodeURIComponent).join("/")}`;
}

function gone(err: unknown): boolean {
  return isAbsent(err);
}

/**
 * Copies `from` (of `size` bytes) to `to` on the server. Returns false if `from` is gone: another
 * write's cleanup deleted it, which it does only once no manifest can name it.
 */
export async function copyData(
  client: S3Client,
  bucket: string,
  from: string,
  to: string,
  size: number,
  contentType: string | undefined,
  signal: AbortSignal | undefined,
  limits: CopyLimits = COPY_LIMITS,
  /** The bound on aborting an abandoned copy (the call's signal may have aborted already). */
  timeoutMs = 5_000,
): Promise<boolean> {
  if (size <= limits.single) {
    try {
      // Metadata (the content type) is copied with the object.
      await client.send(new CopyObjectCommand({ Bucket: bucket, Key: to, CopySource: copySource(bucket, from) }), sendOptions(signal));
      return true;
    } catch (err) {
      if (gone(err)) return false;
      throw err;
    }
  }
  const partBytes = Math.max(limits.part, Math.ceil(size / MAX_PARTS));
  const created = await client.send(
    new CreateMultipartUploadCommand({ Bucket: bucket, Key: to, ...(contentType === undefined ? {} : { ContentType: contentType }) }),
    sendOptions(signal),
  );
  const uploadId = created.UploadId;
  if (uploadId === undefined) throw new Error(`CreateMultipartUpload for ${to} returned no UploadId`);
  try {
    const parts: CompletedPart[] = [];
    for (let start = 0, partNumber = 1; start < size; start += partBytes, partNumber++) {
      const end = Math.min(start + partBytes, size) - 1;
      const res = await client.send(
        new UploadPartCopyCommand({
          Bucket: bucket,
          Key: to,
          UploadId: uploadId,
          PartNumber: partNumber,
          CopySource: copySource(bucket, from),
          CopySourceRange: `bytes=${start}-${end}`,
        }),
        sendOptions(signal),
      );
      parts.push({ PartNumber: partNumber, ETag: res.CopyPartResult?.ETag });
    }
    await client.send(
      new CompleteMultipartUploadCommand({ Bucket: bucket, Key: to, UploadId: uploadId, MultipartUpload: { Parts: parts } }),
      sendOptions(signal),
    );
    return true;
  } catch (err) {
    // Parts of an abandoned upload are stored (and billed) until aborted.
    await client
      .send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: to, UploadId: uploadId }), { abortSignal: requestSignal(timeoutMs) })
      .catch(() => undefined);
    if (gone(err)) return false;
    throw err;
  }
}
