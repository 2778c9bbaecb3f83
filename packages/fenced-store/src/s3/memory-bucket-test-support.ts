import { createHash, randomBytes } from "node:crypto";
import type { EtagForm } from "./conditional.js";

/**
 * The state of an in-memory S3 server and the operations the S3 store sends, each applied at once
 * and answered as S3 answers over HTTP (status, headers, XML body). memory-s3-test-support.ts
 * decodes requests into these calls and decides when each is applied; what differs between
 * backends is a QuirkProfile.
 */

/** An S3 error answer: its HTTP status and the Code its XML body carries. */
export interface ErrorAnswer {
  readonly status: number;
  readonly code: string;
}

/** How a backend differs from another where the store depends on it (BRIEF §5; conditional.ts, failures.ts). */
export interface QuirkProfile {
  readonly name: string;
  /** The spellings of an object's ETag that If-Match on PUT matches. */
  readonly ifMatchForms: readonly EtagForm[];
  /** The spellings that GET If-None-Match matches (answered 304). */
  readonly ifNoneMatchForms: readonly EtagForm[];
  /** The answer to a PUT with If-Match on a missing key. */
  readonly ifMatchMissing: ErrorAnswer;
  /**
   * The answers the loser of a true race may get: a conditional PUT whose condition held when it
   * arrived, taken by another write before it was applied. The scheduler chooses one.
   */
  readonly raceLoser: readonly ErrorAnswer[];
  /** Whether DeleteObject honours If-Match (412 when it fails) or deletes regardless. */
  readonly deleteIfMatch: "honoured" | "ignored";
  /** The least size of a multipart upload's part other than the last (EntityTooSmall below). */
  readonly minPartSize: number;
  /** Whether CompleteMultipartUpload must name every part uploaded (InvalidPart otherwise) or may name a subset. */
  readonly completeNamesEveryPart: boolean;
  /** How the ETag in the XML answer of CopyObject and UploadPartCopy is spelled. */
  readonly copyResultEtag: EtagForm;
  /** The ETag in CompleteMultipartUpload's XML answer: the object's, quoted, or left empty. */
  readonly completeResultEtag: "quoted" | "empty";
  /** CompleteMultipartUpload of an upload it completed before (the SDK's retry after a lost answer): answered as the first time, or 404 NoSuchUpload. */
  readonly completeAgain: "NoSuchUpload" | { readonly replayedEtag: "bare" | "quoted" | "empty" };
}

const PRECONDITION: ErrorAnswer = { status: 412, code: "PreconditionFailed" };
const MiB = 1024 * 1024;

/** Ceph radosgw 16.2 as BRIEF §5 observed it; memory-s3.contract.test.ts checks each line against the real one. */
export const radosgwProfile: QuirkProfile = {
  name: "radosgw",
  ifMatchForms: ["bare"],
  ifNoneMatchForms: ["bare", "quoted"],
  ifMatchMissing: PRECONDITION,
  // BRIEF §5: "the loser of a true race may get 500 instead of 412/409".
  raceLoser: [PRECONDITION, { status: 500, code: "UnknownError" }],
  deleteIfMatch: "ignored",
  minPartSize: 5 * MiB,
  // Found by memory-s3.contract.test.ts, beyond BRIEF §5 (the store passes back what it was given, so neither matters to it).
  completeNamesEveryPart: true,
  copyResultEtag: "bare",
  completeResultEtag: "empty",
  completeAgain: { replayedEtag: "bare" }, // the first answer's is empty
};

/**
 * AWS S3 as BRIEF §4 and §5 document it (never run here): ETag spellings, 404 for If-Match on a
 * missing key, 409 ConditionalRequestConflict for a concurrent conditional write. The rest is AWS's
 * own documentation, unverified here: the brief says only that conditional DELETE is not portable
 * (the store never sends one), and nothing of multipart answers.
 */
export const awsProfile: QuirkProfile = {
  name: "aws",
  ifMatchForms: ["bare", "quoted"],
  ifNoneMatchForms: ["bare", "quoted"],
  ifMatchMissing: { status: 404, code: "NoSuchKey" },
  raceLoser: [PRECONDITION, { status: 409, code: "ConditionalRequestConflict" }],
  deleteIfMatch: "honoured",
  minPartSize: 5 * MiB,
  completeNamesEveryPart: false,
  copyResultEtag: "quoted",
  completeResultEtag: "quoted",
  // Unverified: the harsher answer, which retried completions are reported to get (ydb-platform/ydb#49947).
  completeAgain: "NoSuchUpload",
};

export interface Stored {
  readonly body: Buffer;
  /** Bare. */
  readonly etag: string;
  readonly contentType: string | undefined;
  readonly lastModified: Date;
}

interface Upload {
  readonly id: string;
  readonly key: string;
  readonly contentType: string | undefined;
  readonly initiated: Date;
  readonly parts: Map<number, Stored>;
}

/** One bucket: its objects and its open multipart uploads. */
export class MemoryBucket {
  readonly objects = new Map<string, Stored>();
  readonly uploads = new Map<string, Upload>();
  /** Uploads completed, by id: the object each completion wrote (QuirkProfile.completeAgain). */
  readonly completed = new Map<string, { key: string; object: Stored }>();

  constructor(readonly name: string) {}

  set(key: string, body: Buffer, contentType: string | undefined, etag = md5(body)): Stored {
    const stored = { body, etag, contentType, lastModified: new Date() };
    this.objects.set(key, stored);
    return stored;
  }

  createUpload(key: string, contentType: string | undefined): Upload {
    const upload = { id: `2~${randomBytes(16).toString("base64url")}`, key, contentType, initiated: new Date(), parts: new Map() };
    this.uploads.set(upload.id, upload);
    return upload;
  }

  /** The upload of this id for this key, or NoSuchUpload. */
  upload(key: string, id: string): Upload | ErrorAnswer {
    const upload = this.uploads.get(id);
    return upload?.key === key ? upload : { status: 404, code: "NoSuchUpload" };
  }

  /** Joins the parts named (ascending, each with its ETag) into the object; the upload is gone after. */
  complete(upload: Upload, named: readonly { partNumber: number; etag: string }[], profile: QuirkProfile): Stored | ErrorAnswer {
    if (profile.completeNamesEveryPart && named.length !== upload.parts.size) return { status: 400, code: "InvalidPart" };
    const parts: Stored[] = [];
    for (const [i, { partNumber, etag }] of named.entries()) {
      const part = upload.parts.get(partNumber);
      if (part === undefined || part.etag !== etag) return { status: 400, code: "InvalidPart" };
      if (i > 0 && partNumber <= (named[i - 1]?.partNumber ?? 0)) return { status: 400, code: "InvalidPartOrder" };
      if (i < named.length - 1 && part.body.length < profile.minPartSize) return { status: 400, code: "EntityTooSmall" };
      parts.push(part);
    }
    if (parts.length === 0) return { status: 400, code: "MalformedXML" };
    const digests = Buffer.concat(parts.map((p) => Buffer.from(p.etag, "hex")));
    const etag = `${md5(digests)}-${parts.length}`;
    this.uploads.delete(upload.id);
    const object = this.set(upload.key, Buffer.concat(parts.map((p) => p.body)), upload.contentType, etag);
    this.completed.set(upload.id, { key: upload.key, object });
    return object;
  }

  /** Keys under `prefix` in S3's order (by their UTF-8 bytes), after `after`. */
  keys(prefix: string, after: string | undefined): string[] {
    const keys = [...this.objects.keys()].filter((k) => k.startsWith(prefix) && (after === undefined || byBytes(k, after) > 0));
    return keys.sort(byBytes);
  }

  /** Open uploads under `prefix` by key, then by initiation, after the markers (ListMultipartUploads). */
  listUploads(prefix: string, keyMarker: string | undefined, idMarker: string | undefined): Upload[] {
    const all = [...this.uploads.values()].filter((u) => u.key.startsWith(prefix)).sort((a, b) => byBytes(a.key, b.key));
    if (keyMarker === undefined) return all;
    const sameKey = all.filter((u) => u.key === keyMarker);
    const afterId = idMarker === undefined ? [] : sameKey.slice(sameKey.findIndex((u) => u.id === idMarker) + 1);
    return [...afterId, ...all.filter((u) => byBytes(u.key, keyMarker) > 0)];
  }
}

export function md5(bytes: Buffer): string {
  return createHash("md5").update(bytes).digest("hex");
}

function byBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}

/** Whether an If-Match / If-None-Match header names this (bare) ETag in a spelling the profile matches. */
export function etagMatches(header: string, etag: string, forms: readonly EtagForm[]): boolean {
  return header.split(",").some((one) => {
    const value = one.trim();
    if (value === "*") return true;
    return (forms.includes("bare") && value === etag) || (forms.includes("quoted") && value === `"${etag}"`);
  });
}

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;" };
const UNESCAPES: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };

export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c] ?? c);
}

export function unescapeXml(text: string): string {
  return text.replace(/&(#x[0-9a-f]+|#\d+|\w+);/gi, (whole, name: string) => {
    if (name.startsWith("#x") || name.startsWith("#X")) return String.fromCodePoint(parseInt(name.slice(2), 16));
    if (name.startsWith("#")) return String.fromCodePoint(parseInt(name.slice(1), 10));
    return UNESCAPES[name] ?? whole;
  });
}

/** The text of every `<tag>` element directly in `xml` (a request body the SDK wrote: no attributes on these). */
export function elements(xml: string, tag: string): string[] {
  return [...xml.matchAll(new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`, "g"))].map((m) => m[1] ?? "");
}

/** An XML element with escaped text content; children given as already-built XML. */
export function el(tag: string, content: string | number | boolean | readonly string[]): string {
  const inner = Array.isArray(content) ? content.join("") : escapeXml(String(content));
  return `<${tag}>${inner}</${tag}>`;
}
