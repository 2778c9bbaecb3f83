import { Readable } from "node:stream";
import type { StoredVersion } from "../contract.js";
import { ContentionError } from "../errors.js";
import { openData } from "./body.js";
import { readAll } from "../objects/body.js";
import type { Snapshot } from "../cas/io.js";
import type { S3Io } from "./io.js";
import { MissingBodies, type ManifestHeader } from "../cas/manifest.js";

/** The contract's StoredVersion (holder null also for a version written in format /1), and the content type. */
interface S3Meta extends StoredVersion {
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

/** The key's current version with its body an open stream; undefined if absent or a tombstone (get()). */
export async function openCurrent(io: S3Io, key: string, signal: AbortSignal): Promise<S3Object | undefined> {
  const missing = new MissingBodies(key);
  for (let attempt = 0; attempt < io.options.maxAttempts; attempt++) {
    const found = await io.readManifest(key, signal);
    if (found === null) return undefined;
    const { header } = found.snap;
    if (header.body.kind === "tombstone") return undefined;
    if (header.body.kind === "inline") {
      const bytes = found.inline ?? Buffer.alloc(0);
      return { ...meta(header), body: Readable.from([bytes], { objectMode: false }), size: bytes.length };
    }
    const data = await openData(io.client, io.options.bucket, header.body.dataKey, signal);
    // Gone: superseded and cleaned up after we read the manifest. The newer manifest has the newer body.
    if (data === undefined) {
      missing.saw(header);
      continue;
    }
    return { ...meta(header), body: data.body, size: data.size };
  }
  throw changedWhileRead(key, io.options.maxAttempts);
}

/** The current manifest and its body read whole (bytes undefined for a tombstone); null if absent. */
export async function readCurrent(
  io: S3Io,
  key: string,
  signal?: AbortSignal,
): Promise<{ snap: Snapshot; bytes: Buffer | undefined } | null> {
  const missing = new MissingBodies(key);
  for (let attempt = 0; attempt < io.options.maxAttempts; attempt++) {
    const found = await io.readManifest(key, signal);
    if (found === null) return null;
    const { body } = found.snap.header;
    if (body.kind !== "object") return { snap: found.snap, bytes: body.kind === "inline" ? (found.inline ?? Buffer.alloc(0)) : undefined };
    const data = await openData(io.client, io.options.bucket, body.dataKey, signal);
    if (data !== undefined) return { snap: found.snap, bytes: await readAll(data.body) };
    missing.saw(found.snap.header);
  }
  throw changedWhileRead(key, io.options.maxAttempts);
}

/** A version's metadata, as get(), getBytes() and update()'s callback show it. */
export function meta(header: ManifestHeader): S3Meta {
  return {
    version: header.writeId,
    token: BigInt(header.token),
    holder: header.holder,
    resource: header.owner,
    contentType: header.contentType,
  };
}

function changedWhileRead(key: string, attempts: number): ContentionError {
  return new ContentionError(key, attempts, `read ${JSON.stringify(key)}: the key changed ${attempts} times while it was being read`);
}
