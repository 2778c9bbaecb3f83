import {
  el,
  elements,
  etagMatches,
  md5,
  unescapeXml,
  type ErrorAnswer,
  type MemoryBucket,
  type QuirkProfile,
  type Stored,
} from "./memory-bucket-test-support.js";

/**
 * The S3 operations the store sends, applied to an in-memory bucket and answered as S3 does: exactly
 * these (anything else is answered 501, so a test notices a request the server does not model).
 */

/** A request decoded into its S3 operation (memory-s3-test-support.ts). */
export interface Decoded {
  readonly operation: string;
  readonly bucket: string;
  readonly key: string | undefined;
  readonly query: Readonly<Record<string, string>>;
  /** Lower-cased names. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
}

/** An answer: an error (its code becomes the XML error body), or a success with headers and a body. */
export interface Answer {
  readonly status: number;
  readonly code?: string;
  readonly headers?: Record<string, string>;
  readonly body?: Buffer;
  /** The object a successful write left at the key. */
  readonly wrote?: Stored;
}

export interface ApplyContext {
  readonly profile: QuirkProfile;
  /** The object at the request's key when the request arrived: a condition that held then and fails now lost a race. */
  readonly atArrival: Stored | undefined;
  /** Picks one of n answers the backend may give. */
  choose(n: number): number;
}

type Operation = (bucket: MemoryBucket, key: string, r: Decoded, c: ApplyContext) => Answer;

const OK_XML = { "content-type": "application/xml" };

function xml(root: string, children: readonly string[]): Answer {
  const text = `<?xml version="1.0" encoding="UTF-8"?><${root} xmlns="http://s3.amazonaws.com/doc/2006-03-01/">${children.join("")}</${root}>`;
  return { status: 200, headers: OK_XML, body: Buffer.from(text, "utf8") };
}

const quoted = (etag: string): string => `"${etag}"`;
const spelled = (etag: string, form: "bare" | "quoted" | "empty"): string =>
  form === "quoted" ? quoted(etag) : form === "bare" ? etag : "";

/** The condition a conditional PUT sends, judged against an object (undefined: absent). */
function putConditionHolds(r: Decoded, object: Stored | undefined, profile: QuirkProfile): boolean {
  const ifNoneMatch = r.headers["if-none-match"];
  const ifMatch = r.headers["if-match"];
  if (ifNoneMatch !== undefined && object !== undefined && etagMatches(ifNoneMatch, object.etag, ["bare", "quoted"])) return false;
  return ifMatch === undefined || (object !== undefined && etagMatches(ifMatch, object.etag, profile.ifMatchForms));
}

const putObject: Operation = (bucket, key, r, c) => {
  const current = bucket.objects.get(key);
  if (!putConditionHolds(r, current, c.profile)) {
    // A condition that held when the request arrived lost a race to a write applied meanwhile.
    if (putConditionHolds(r, c.atArrival, c.profile)) return c.profile.raceLoser[c.choose(c.profile.raceLoser.length)] ?? PRECONDITION;
    return current === undefined && r.headers["if-match"] !== undefined ? c.profile.ifMatchMissing : PRECONDITION;
  }
  const wrote = bucket.set(key, r.body, r.headers["content-type"]);
  return { status: 200, headers: { etag: quoted(wrote.etag) }, wrote };
};

const PRECONDITION: ErrorAnswer = { status: 412, code: "PreconditionFailed" };
const NO_SUCH_KEY: ErrorAnswer = { status: 404, code: "NoSuchKey" };

const getObject: Operation = (bucket, key, r, c) => {
  const object = bucket.objects.get(key);
  if (object === undefined) return NO_SUCH_KEY;
  const headers = { etag: quoted(object.etag), "last-modified": object.lastModified.toUTCString() };
  const ifNoneMatch = r.headers["if-none-match"];
  if (ifNoneMatch !== undefined && etagMatches(ifNoneMatch, object.etag, c.profile.ifNoneMatchForms)) return { status: 304, headers };
  return { status: 200, headers: { ...headers, "content-type": object.contentType ?? "application/octet-stream" }, body: object.body };
};

/** GetObject's answer without its body; an absent key a bare 404, as S3 answers a HEAD. */
const headObject: Operation = (bucket, key, r, c) => {
  const got = getObject(bucket, key, r, c);
  return got.status === 404
    ? { status: 404 }
    : { status: got.status, headers: { ...got.headers, "content-length": String(got.body?.length ?? 0) } };
};

const deleteObject: Operation = (bucket, key, r, c) => {
  const ifMatch = r.headers["if-match"];
  if (ifMatch !== undefined && c.profile.deleteIfMatch === "honoured") {
    const object = bucket.objects.get(key);
    if (object === undefined) return NO_SUCH_KEY;
    if (!etagMatches(ifMatch, object.etag, c.profile.ifMatchForms)) return PRECONDITION;
  }
  bucket.objects.delete(key);
  return { status: 204 };
};

/** The object a copy reads: x-amz-copy-source is `bucket/key` (or `/bucket/key`), URL-encoded. */
function copySource(bucket: MemoryBucket, r: Decoded): Stored | ErrorAnswer {
  const source = decodeURIComponent(r.headers["x-amz-copy-source"] ?? "").replace(/^\//, "");
  const slash = source.indexOf("/");
  if (source.slice(0, slash) !== bucket.name) return { status: 400, code: "InvalidRequest" }; // the store copies within its bucket
  return bucket.objects.get(source.slice(slash + 1)) ?? NO_SUCH_KEY;
}

const isError = (x: object): x is ErrorAnswer => "code" in x;

const copyObject: Operation = (bucket, key, r, c) => {
  const source = copySource(bucket, r);
  if (isError(source)) return source;
  const wrote = bucket.set(key, source.body, source.contentType);
  const fields = [el("LastModified", wrote.lastModified.toISOString()), el("ETag", spelled(wrote.etag, c.profile.copyResultEtag))];
  return { ...xml("CopyObjectResult", fields), wrote };
};

const createMultipartUpload: Operation = (bucket, key, r) => {
  const upload = bucket.createUpload(key, r.headers["content-type"]);
  return xml("InitiateMultipartUploadResult", [el("Bucket", bucket.name), el("Key", key), el("UploadId", upload.id)]);
};

/** A part number S3 accepts: 1 to 10,000. */
function partNumber(r: Decoded): number | undefined {
  const n = Number(r.query.partNumber);
  return Number.isInteger(n) && n >= 1 && n <= 10_000 ? n : undefined;
}

const uploadPart: Operation = (bucket, key, r) => {
  const upload = bucket.upload(key, r.query.uploadId ?? "");
  const n = partNumber(r);
  if (isError(upload)) return upload;
  if (n === undefined) return { status: 400, code: "InvalidArgument" };
  const part = { body: r.body, etag: md5(r.body), contentType: undefined, lastModified: new Date() };
  upload.parts.set(n, part);
  return { status: 200, headers: { etag: quoted(part.etag) } };
};

const uploadPartCopy: Operation = (bucket, key, r, c) => {
  const upload = bucket.upload(key, r.query.uploadId ?? "");
  const n = partNumber(r);
  if (isError(upload)) return upload;
  if (n === undefined) return { status: 400, code: "InvalidArgument" };
  const source = copySource(bucket, r);
  if (isError(source)) return source;
  const range = /^bytes=(\d+)-(\d+)$/.exec(r.headers["x-amz-copy-source-range"] ?? "");
  const [start, end] = range === null ? [0, source.body.length - 1] : [Number(range[1]), Number(range[2])];
  if (end >= source.body.length || start > end) return { status: 400, code: "InvalidRange" };
  const body = source.body.subarray(start, end + 1);
  const part = { body, etag: md5(body), contentType: undefined, lastModified: new Date() };
  upload.parts.set(n, part);
  return xml("CopyPartResult", [
    el("LastModified", part.lastModified.toISOString()),
    el("ETag", spelled(part.etag, c.profile.copyResultEtag)),
  ]);
};

const completeMultipartUpload: Operation = (bucket, key, r, c) => {
  const upload = bucket.upload(key, r.query.uploadId ?? "");
  const before = bucket.completed.get(r.query.uploadId ?? "");
  const again = c.profile.completeAgain;
  // Sent again after it completed (a retry after a lost answer): replayed, or NoSuchUpload as for any unknown upload.
  if (isError(upload) && before?.key === key && again !== "NoSuchUpload") return completed(bucket, key, before.object, again.replayedEtag);
  if (isError(upload)) return upload;
  const named = elements(r.body.toString("utf8"), "Part").map((part) => ({
    partNumber: Number(elements(part, "PartNumber")[0]),
    etag: unescapeXml(elements(part, "ETag")[0] ?? "").replaceAll('"', ""),
  }));
  const wrote = bucket.complete(upload, named, c.profile);
  if (isError(wrote)) return wrote;
  return { ...completed(bucket, key, wrote, c.profile.completeResultEtag), wrote };
};

function completed(bucket: MemoryBucket, key: string, object: Stored, form: "bare" | "quoted" | "empty"): Answer {
  const location = `http://memory.s3.invalid/${bucket.name}/${key}`;
  const etag = el("ETag", spelled(object.etag, form));
  return xml("CompleteMultipartUploadResult", [el("Location", location), el("Bucket", bucket.name), el("Key", key), etag]);
}

const abortMultipartUpload: Operation = (bucket, key, r) => {
  const upload = bucket.upload(key, r.query.uploadId ?? "");
  if (isError(upload)) return upload;
  bucket.uploads.delete(upload.id);
  return { status: 204 };
};

const OBJECT_OPERATIONS: Readonly<Record<string, Operation>> = {
  PutObject: putObject,
  GetObject: getObject,
  HeadObject: headObject,
  DeleteObject: deleteObject,
  CopyObject: copyObject,
  CreateMultipartUpload: createMultipartUpload,
  UploadPart: uploadPart,
  UploadPartCopy: uploadPartCopy,
  CompleteMultipartUpload: completeMultipartUpload,
  AbortMultipartUpload: abortMultipartUpload,
};

function listObjectsV2(bucket: MemoryBucket, r: Decoded): Answer {
  const prefix = r.query.prefix ?? "";
  const max = Number(r.query["max-keys"] ?? 1000);
  const token = r.query["continuation-token"];
  const after = token === undefined ? undefined : Buffer.from(token, "base64url").toString("utf8");
  const keys = bucket.keys(prefix, after);
  const page = keys.slice(0, max);
  const truncated = keys.length > page.length;
  const contents = page.map((key) => {
    const object = bucket.objects.get(key) as Stored;
    const fields = [el("Key", key), el("LastModified", object.lastModified.toISOString()), el("ETag", quoted(object.etag))];
    return el("Contents", [...fields, el("Size", object.body.length), el("StorageClass", "STANDARD")]);
  });
  const next = truncated ? [el("NextContinuationToken", Buffer.from(page.at(-1) ?? "", "utf8").toString("base64url"))] : [];
  const head = [el("Name", bucket.name), el("Prefix", prefix), el("KeyCount", page.length), el("MaxKeys", max)];
  return xml("ListBucketResult", [...head, el("IsTruncated", truncated), ...next, ...contents]);
}

function listMultipartUploads(bucket: MemoryBucket, r: Decoded): Answer {
  const max = Number(r.query["max-uploads"] ?? 1000);
  const uploads = bucket.listUploads(r.query.prefix ?? "", r.query["key-marker"], r.query["upload-id-marker"]);
  const page = uploads.slice(0, max);
  const truncated = uploads.length > page.length;
  const last = page.at(-1);
  const next = truncated && last !== undefined ? [el("NextKeyMarker", last.key), el("NextUploadIdMarker", last.id)] : [];
  const listed = page.map((u) => el("Upload", [el("Key", u.key), el("UploadId", u.id), el("Initiated", u.initiated.toISOString())]));
  return xml("ListMultipartUploadsResult", [
    el("Bucket", bucket.name),
    el("MaxUploads", max),
    el("IsTruncated", truncated),
    ...next,
    ...listed,
  ]);
}

function deleteObjects(bucket: MemoryBucket, r: Decoded): Answer {
  const text = r.body.toString("utf8");
  const keys = elements(text, "Object").map((o) => unescapeXml(elements(o, "Key")[0] ?? ""));
  for (const key of keys) bucket.objects.delete(key);
  // Quiet: the answer lists only the keys that failed (none here).
  const quiet = elements(text, "Quiet")[0] === "true";
  return xml("DeleteResult", quiet ? [] : keys.map((key) => el("Deleted", [el("Key", key)])));
}

export function applyCall(bucket: MemoryBucket, r: Decoded, c: ApplyContext): Answer {
  if (r.key !== undefined) return OBJECT_OPERATIONS[r.operation]?.(bucket, r.key, r, c) ?? { status: 501, code: "NotImplemented" };
  if (r.operation === "ListObjectsV2") return listObjectsV2(bucket, r);
  if (r.operation === "ListMultipartUploads") return listMultipartUploads(bucket, r);
  if (r.operation === "DeleteObjects") return deleteObjects(bucket, r);
  return { status: 501, code: "NotImplemented" };
}
