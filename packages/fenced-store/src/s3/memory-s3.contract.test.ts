import { createHash, randomBytes } from "node:crypto";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  UploadPartCommand,
  UploadPartCopyCommand,
  S3Client,
} from "@aws-sdk/client-s3";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { statusOf, codeOf } from "../aws/answers.js";
import { MemoryS3, radosgwProfile, type QuirkProfile } from "./memory-s3-test-support.js";

/**
 * The in-memory S3 server against the real radosgw: one table of cases, each written once and run
 * through the real SDK against both. Where radosgw differs from S3 as AWS documents it, the case
 * reads the difference from the profile (radosgwProfile), so a claim the profile makes that radosgw
 * does not bear out fails here.
 */

interface Backend {
  readonly profile: QuirkProfile;
  readonly bucket: string;
  /** Clients as separate processes; all but the first send every request once (maxAttempts: 1), so races show their first answers. */
  readonly clients: readonly [S3Client, ...S3Client[]];
}

const md5 = (bytes: Buffer | string): string => createHash("md5").update(bytes).digest("hex");

/** The answer's status and S3 code, or 200 and the output. */
async function answer<T>(work: Promise<T>): Promise<{ status: number; code?: string | undefined; output?: T }> {
  try {
    return { status: 200, output: await work };
  } catch (err) {
    const status = statusOf(err);
    if (status === undefined) throw err;
    return { status, code: status === 304 ? undefined : codeOf(err) };
  }
}

async function text(b: Backend, key: string): Promise<string | undefined> {
  const got = await answer(b.clients[0].send(new GetObjectCommand({ Bucket: b.bucket, Key: key })));
  if (got.status === 404) return undefined;
  return Buffer.from((await got.output?.Body?.transformToByteArray()) ?? []).toString("utf8");
}

function put(b: Backend, key: string, body: string | Buffer, condition: { IfMatch: string } | { IfNoneMatch: "*" }, client = b.clients[0]) {
  return answer(client.send(new PutObjectCommand({ Bucket: b.bucket, Key: key, Body: body, ...condition })));
}

/** A fresh key per case and backend run. */
const fresh = (name: string): string => `${name}/${randomBytes(6).toString("hex")}`;

type Case = readonly [name: string, run: (b: Backend) => Promise<void>];

const CASES: readonly Case[] = [
  [
    "PUT If-None-Match: * creates (200, the quoted MD5 of the body as ETag); GET returns the bytes and that ETag",
    async (b) => {
      const key = fresh("create");
      const created = await put(b, key, "one", { IfNoneMatch: "*" });
      expect(created.status).toBe(200);
      expect(created.output?.ETag).toBe(`"${md5("one")}"`);
      const got = await b.clients[0].send(new GetObjectCommand({ Bucket: b.bucket, Key: key }));
      expect(got.ETag).toBe(`"${md5("one")}"`);
      expect(await text(b, key)).toBe("one");
    },
  ],
  [
    "PUT If-None-Match: * over an existing key: 412 PreconditionFailed, the object unchanged",
    async (b) => {
      const key = fresh("exists");
      await put(b, key, "one", { IfNoneMatch: "*" });
      expect(await put(b, key, "two", { IfNoneMatch: "*" })).toMatchObject({ status: 412, code: "PreconditionFailed" });
      expect(await text(b, key)).toBe("one");
    },
  ],
  [
    "PUT If-Match with the current ETag: 200 and the new body's ETag; with a stale one: 412, unchanged",
    async (b) => {
      const key = fresh("swap");
      await put(b, key, "one", { IfNoneMatch: "*" });
      const swapped = await put(b, key, "two", { IfMatch: md5("one") });
      expect(swapped).toMatchObject({ status: 200, output: { ETag: `"${md5("two")}"` } });
      expect(await put(b, key, "three", { IfMatch: md5("one") })).toMatchObject({ status: 412, code: "PreconditionFailed" });
      expect(await text(b, key)).toBe("two");
    },
  ],
  [
    "PUT If-Match spelled quoted or bare: each matches as the profile's ifMatchForms says",
    async (b) => {
      for (const form of ["quoted", "bare"] as const) {
        const key = fresh(`form-${form}`);
        await put(b, key, "one", { IfNoneMatch: "*" });
        const etag = form === "quoted" ? `"${md5("one")}"` : md5("one");
        const matches = b.profile.ifMatchForms.includes(form);
        expect((await put(b, key, "two", { IfMatch: etag })).status, form).toBe(matches ? 200 : 412);
        expect(await text(b, key)).toBe(matches ? "two" : "one");
      }
    },
  ],
  [
    "PUT If-Match on a missing key: the profile's ifMatchMissing answer, and the key stays missing",
    async (b) => {
      const key = fresh("missing");
      const { status, code } = await put(b, key, "one", { IfMatch: md5("anything") });
      expect({ status, code }).toEqual(b.profile.ifMatchMissing);
      expect(await text(b, key)).toBeUndefined();
    },
  ],
  [
    "GET If-None-Match: 304 for the current ETag in each spelling the profile matches, the object for another, 404 NoSuchKey for a missing key",
    async (b) => {
      const key = fresh("revalidate");
      await put(b, key, "one", { IfNoneMatch: "*" });
      const get = (IfNoneMatch: string, Key = key) =>
        answer(b.clients[0].send(new GetObjectCommand({ Bucket: b.bucket, Key, IfNoneMatch })));
      for (const form of ["bare", "quoted"] as const) {
        const etag = form === "quoted" ? `"${md5("one")}"` : md5("one");
        expect((await get(etag)).status, form).toBe(b.profile.ifNoneMatchForms.includes(form) ? 304 : 200);
      }
      const other = await get(md5("other"));
      expect(other.status).toBe(200);
      expect(other.output?.ETag).toBe(`"${md5("one")}"`);
      expect(await get(md5("one"), fresh("absent"))).toMatchObject({ status: 404, code: "NoSuchKey" });
    },
  ],
  [
    "DeleteObject with a wrong If-Match: deleted (204) where the profile ignores the condition, 412 where it honours it; a missing key: 204",
    async (b) => {
      const key = fresh("delete");
      await put(b, key, "one", { IfNoneMatch: "*" });
      const deleted = await answer(b.clients[0].send(new DeleteObjectCommand({ Bucket: b.bucket, Key: key, IfMatch: md5("other") })));
      const ignored = b.profile.deleteIfMatch === "ignored";
      expect(deleted.status).toBe(ignored ? 200 : 412); // the SDK reports a 204 as a resolved call
      expect(await text(b, key)).toBe(ignored ? undefined : "one");
      expect((await answer(b.clients[0].send(new DeleteObjectCommand({ Bucket: b.bucket, Key: fresh("never") })))).status).toBe(200);
    },
  ],
  [
    "conditional PUTs raced from six clients (If-Match, then If-None-Match: *): exactly one lands; each loser gets one of the profile's raceLoser answers, and each of them comes",
    async (b) => {
      const seen = new Set<string>();
      // radosgw answered 62 of 300 losers 500 (UnknownError), the rest 412: 20 rounds of 10 losers miss a 500 with odds below 1e-19.
      for (let round = 0; round < 20; round++) {
        const key = fresh("race");
        await put(b, key, "base", { IfNoneMatch: "*" });
        const racers = b.clients.slice(1);
        const swaps = await Promise.all(racers.map((c, i) => put(b, key, `swap ${i}`, { IfMatch: md5("base") }, c)));
        const creates = await Promise.all(racers.map((c, i) => put(b, `${key}-new`, `create ${i}`, { IfNoneMatch: "*" }, c)));
        for (const [results, what] of [
          [swaps, "swap"],
          [creates, "create"],
        ] as const) {
          const winners = results.flatMap((r, i) => (r.status === 200 ? [i] : []));
          expect(winners, what).toHaveLength(1);
          for (const r of results.filter((r) => r.status !== 200)) {
            expect(b.profile.raceLoser).toContainEqual({ status: r.status, code: r.code });
            seen.add(`${r.status} ${r.code}`);
          }
          expect(await text(b, what === "swap" ? key : `${key}-new`)).toBe(`${what} ${winners[0]}`);
        }
      }
      expect([...seen].sort()).toEqual(b.profile.raceLoser.map((a) => `${a.status} ${a.code}`).sort());
    },
  ],
  [
    "multipart as the store sends it: create, parts (all but the last at least minPartSize), listed while open, complete in part order, gone from the list; abort; NoSuchUpload after",
    async (b) => {
      const [client] = b.clients;
      const key = fresh("data/multi");
      const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: b.bucket, Key: key, ContentType: "text/csv" }));
      const first = Buffer.alloc(b.profile.minPartSize, "a");
      const parts = [];
      for (const [i, body] of [first, Buffer.from("tail")].entries()) {
        const res = await client.send(
          new UploadPartCommand({ Bucket: b.bucket, Key: key, UploadId, PartNumber: i + 1, Body: body, ContentLength: body.length }),
        );
        expect(res.ETag).toBe(`"${md5(body)}"`);
        parts.push({ PartNumber: i + 1, ETag: res.ETag });
      }
      const listed = await client.send(new ListMultipartUploadsCommand({ Bucket: b.bucket, Prefix: key }));
      expect((listed.Uploads ?? []).map((u) => [u.Key, u.UploadId])).toEqual([[key, UploadId]]);
      const done = await client.send(
        new CompleteMultipartUploadCommand({ Bucket: b.bucket, Key: key, UploadId, MultipartUpload: { Parts: parts } }),
      );
      const etag = `"${md5(Buffer.concat(parts.map((p) => Buffer.from(p.ETag?.replaceAll('"', "") ?? "", "hex"))))}-2"`;
      expect(done.ETag).toBe(b.profile.completeResultEtag === "empty" ? "" : etag);
      const got = await client.send(new GetObjectCommand({ Bucket: b.bucket, Key: key }));
      expect([got.ContentType, got.ETag]).toEqual(["text/csv", etag]);
      expect(Buffer.from(await got.Body!.transformToByteArray()).equals(Buffer.concat([first, Buffer.from("tail")]))).toBe(true);
      expect((await client.send(new ListMultipartUploadsCommand({ Bucket: b.bucket, Prefix: key }))).Uploads ?? []).toEqual([]);

      // Completing it again (the SDK's retry after a lost answer): as the profile's completeAgain says.
      const again = client.send(
        new CompleteMultipartUploadCommand({ Bucket: b.bucket, Key: key, UploadId, MultipartUpload: { Parts: parts } }),
      );
      const { completeAgain } = b.profile;
      if (completeAgain === "NoSuchUpload") expect(await answer(again)).toMatchObject({ status: 404, code: "NoSuchUpload" });
      else {
        const spelledAgain = { bare: etag.replaceAll('"', ""), quoted: etag, empty: "" }[completeAgain.replayedEtag];
        expect(await answer(again)).toMatchObject({ status: 200, output: { ETag: spelledAgain } });
      }

      // Aborting it once completed: the upload is gone, the object stays.
      const abortDone = client.send(new AbortMultipartUploadCommand({ Bucket: b.bucket, Key: key, UploadId }));
      expect(await answer(abortDone)).toMatchObject({ status: 404, code: "NoSuchUpload" });
      expect((await text(b, key))?.length).toBe(first.length + 4);

      const other = await client.send(new CreateMultipartUploadCommand({ Bucket: b.bucket, Key: `${key}-x` }));
      const abort = () =>
        answer(client.send(new AbortMultipartUploadCommand({ Bucket: b.bucket, Key: `${key}-x`, UploadId: other.UploadId })));
      expect((await abort()).status).toBe(200);
      expect(await abort()).toMatchObject({ status: 404, code: "NoSuchUpload" });
      const late = client.send(
        new UploadPartCommand({ Bucket: b.bucket, Key: `${key}-x`, UploadId: other.UploadId, PartNumber: 1, Body: "x" }),
      );
      expect(await answer(late)).toMatchObject({ status: 404, code: "NoSuchUpload" });
    },
  ],
  [
    "CompleteMultipartUpload naming fewer parts than were uploaded: 400 InvalidPart where the profile's completeNamesEveryPart says so",
    async (b) => {
      const [client] = b.clients;
      const key = fresh("data/subset");
      const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: b.bucket, Key: key }));
      const parts = [];
      for (const n of [1, 2]) {
        const res = await client.send(new UploadPartCommand({ Bucket: b.bucket, Key: key, UploadId, PartNumber: n, Body: `part ${n}` }));
        parts.push({ PartNumber: n, ETag: res.ETag });
      }
      const complete = client.send(
        new CompleteMultipartUploadCommand({ Bucket: b.bucket, Key: key, UploadId, MultipartUpload: { Parts: parts.slice(1) } }),
      );
      const { status, code } = await answer(complete);
      expect({ status, code }).toEqual(
        b.profile.completeNamesEveryPart ? { status: 400, code: "InvalidPart" } : { status: 200, code: undefined },
      );
      if (status !== 200) await client.send(new AbortMultipartUploadCommand({ Bucket: b.bucket, Key: key, UploadId }));
      expect(await text(b, key)).toBe(status === 200 ? "part 2" : undefined);
    },
  ],
  [
    "CompleteMultipartUpload with a part other than the last below minPartSize: 400 EntityTooSmall",
    async (b) => {
      const [client] = b.clients;
      const key = fresh("data/small");
      const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: b.bucket, Key: key }));
      const parts = [];
      for (const n of [1, 2]) {
        const res = await client.send(new UploadPartCommand({ Bucket: b.bucket, Key: key, UploadId, PartNumber: n, Body: `part ${n}` }));
        parts.push({ PartNumber: n, ETag: res.ETag });
      }
      const complete = client.send(
        new CompleteMultipartUploadCommand({ Bucket: b.bucket, Key: key, UploadId, MultipartUpload: { Parts: parts } }),
      );
      expect(await answer(complete)).toMatchObject({ status: 400, code: "EntityTooSmall" });
      await client.send(new AbortMultipartUploadCommand({ Bucket: b.bucket, Key: key, UploadId }));
    },
  ],
  [
    "CopyObject copies bytes and content type (its answer's ETag spelled as copyResultEtag says; 404 NoSuchKey from a missing source); UploadPartCopy copies a range",
    async (b) => {
      const [client] = b.clients;
      const from = fresh("data/from");
      await client.send(
        new PutObjectCommand({ Bucket: b.bucket, Key: from, Body: "0123456789", ContentType: "text/plain", IfNoneMatch: "*" }),
      );
      const copied = await client.send(new CopyObjectCommand({ Bucket: b.bucket, Key: `${from}-copy`, CopySource: `${b.bucket}/${from}` }));
      const spelled = (etag: string): string => (b.profile.copyResultEtag === "quoted" ? `"${etag}"` : etag);
      expect(copied.CopyObjectResult?.ETag).toBe(spelled(md5("0123456789")));
      const got = await client.send(new GetObjectCommand({ Bucket: b.bucket, Key: `${from}-copy` }));
      expect([got.ContentType, await got.Body?.transformToString()]).toEqual(["text/plain", "0123456789"]);
      const gone = client.send(new CopyObjectCommand({ Bucket: b.bucket, Key: `${from}-x`, CopySource: `${b.bucket}/${from}-absent` }));
      expect(await answer(gone)).toMatchObject({ status: 404, code: "NoSuchKey" });

      const to = `${from}-parts`;
      const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: b.bucket, Key: to }));
      const part = await client.send(
        new UploadPartCopyCommand({
          Bucket: b.bucket,
          Key: to,
          UploadId,
          PartNumber: 1,
          CopySource: `${b.bucket}/${from}`,
          CopySourceRange: "bytes=3-5",
        }),
      );
      expect(part.CopyPartResult?.ETag).toBe(spelled(md5("345")));
      // As copy.ts completes: with the ETags the copies answered.
      const Parts = [{ PartNumber: 1, ETag: part.CopyPartResult?.ETag }];
      await client.send(new CompleteMultipartUploadCommand({ Bucket: b.bucket, Key: to, UploadId, MultipartUpload: { Parts } }));
      expect(await text(b, to)).toBe("345");
    },
  ],
  [
    "ListObjectsV2 lists only keys under its prefix, in byte order, page by page with a continuation token; DeleteObjects (Quiet) removes them",
    async (b) => {
      const [client] = b.clients;
      const base = fresh("list");
      // By UTF-8 bytes: "é" (C3 A9) after "z" (7A).
      const keys = [`${base}/a`, `${base}/b/c`, `${base}/b/d`, `${base}/z`, `${base}/é`];
      for (const key of [...keys, `${base}-sibling`, `${base}x/a`]) await put(b, key, key, { IfNoneMatch: "*" });
      const seen: string[] = [];
      let ContinuationToken: string | undefined;
      let pages = 0;
      do {
        const page = await client.send(new ListObjectsV2Command({ Bucket: b.bucket, Prefix: `${base}/`, MaxKeys: 2, ContinuationToken }));
        pages++;
        seen.push(...(page.Contents ?? []).map((o) => o.Key ?? ""));
        for (const o of page.Contents ?? []) expect(o.Size).toBe(Buffer.byteLength(o.Key ?? ""));
        ContinuationToken = page.IsTruncated === true ? page.NextContinuationToken : undefined;
      } while (ContinuationToken !== undefined);
      expect([seen, pages]).toEqual([keys, 3]);
      const removed = await client.send(
        new DeleteObjectsCommand({ Bucket: b.bucket, Delete: { Objects: keys.map((Key) => ({ Key })), Quiet: true } }),
      );
      expect(removed.Errors ?? []).toEqual([]);
      expect((await client.send(new ListObjectsV2Command({ Bucket: b.bucket, Prefix: `${base}/` }))).Contents ?? []).toEqual([]);
    },
  ],
  [
    "keys with spaces, '+', '%', non-ASCII and '//' are stored, read, copied and listed as they are",
    async (b) => {
      const [client] = b.clients;
      const base = fresh("odd");
      const keys = [`${base}/a b+c`, `${base}/100%25 ü/ä`, `${base}//x?y=z&w`];
      for (const key of keys) await put(b, key, key, { IfNoneMatch: "*" });
      // As copy.ts names a source: each segment URL-encoded, the slashes kept.
      const source = `${b.bucket}/${(keys[0] ?? "").split("/").map(encodeURIComponent).join("/")}`;
      await client.send(new CopyObjectCommand({ Bucket: b.bucket, Key: `${base}/copy`, CopySource: source }));
      expect(await text(b, `${base}/copy`)).toBe(keys[0]);
      for (const key of keys) expect(await text(b, key)).toBe(key);
      const listed = await client.send(new ListObjectsV2Command({ Bucket: b.bucket, Prefix: `${base}/` }));
      expect((listed.Contents ?? []).map((o) => o.Key)).toEqual(
        [...keys, `${base}/copy`].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y))),
      );
    },
  ],
  [
    "ListMultipartUploads pages by key and upload id markers, under its prefix only",
    async (b) => {
      const [client] = b.clients;
      const base = fresh("data/uploads");
      const made: [string, string][] = [];
      for (const key of [`${base}/a`, `${base}/b`, `${base}/b`, `${base}-other`]) {
        const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: b.bucket, Key: key }));
        made.push([key, UploadId ?? ""]);
      }
      const seen: [string, string][] = [];
      let markers: { KeyMarker?: string | undefined; UploadIdMarker?: string | undefined } = {};
      for (;;) {
        const page = await client.send(
          new ListMultipartUploadsCommand({ Bucket: b.bucket, Prefix: `${base}/`, MaxUploads: 1, ...markers }),
        );
        seen.push(...(page.Uploads ?? []).map((u): [string, string] => [u.Key ?? "", u.UploadId ?? ""]));
        if (page.IsTruncated !== true) break;
        markers = { KeyMarker: page.NextKeyMarker, UploadIdMarker: page.NextUploadIdMarker };
      }
      const sameKey = (list: [string, string][]) =>
        [...list].sort((x, y) => (x[0] === y[0] ? x[1].localeCompare(y[1]) : x[0] < y[0] ? -1 : 1));
      // Uploads of one key come in an order of the backend's own: compared as a set per key, the keys in order.
      expect(seen.map(([k]) => k)).toEqual(made.slice(0, 3).map(([k]) => k));
      expect(sameKey(seen)).toEqual(sameKey(made.slice(0, 3)));
      for (const [Key, UploadId] of made) await client.send(new AbortMultipartUploadCommand({ Bucket: b.bucket, Key, UploadId }));
    },
  ],
];

describe("the in-memory S3 server, radosgw profile", () => {
  // Requests sent at once are all in before the first is applied (true races), and race losers get each answer in turn.
  let answers = 0;
  const memory = new MemoryS3(radosgwProfile, {
    turn: () => new Promise((applied) => setImmediate(applied)),
    choose: (_, n) => answers++ % n,
  });
  const racing = [1, 2, 3, 4, 5, 6].map((i) => memory.client(`racer-${i}`, { maxAttempts: 1 }));
  const backend: Backend = { profile: radosgwProfile, bucket: memory.createBucket(), clients: [memory.client("main"), ...racing] };
  it.each(CASES)("%s", (_, run) => run(backend));
});

describe("the real radosgw", () => {
  let server: StartedS3;
  let backend: Backend;
  beforeAll(async () => {
    server = await startS3({ faults: true }); // always the local radosgw, never another S3 this machine may offer
    const { endpoint, region, accessKeyId, secretAccessKey } = server;
    const racer = (): S3Client =>
      new S3Client({ endpoint, region, credentials: { accessKeyId, secretAccessKey }, forcePathStyle: true, maxAttempts: 1 });
    backend = {
      profile: radosgwProfile,
      bucket: await server.createBucket(),
      clients: [server.client(), ...[1, 2, 3, 4, 5, 6].map(racer)],
    };
  });
  afterAll(async () => {
    await server?.stop();
  });
  it.each(CASES)("%s", (_, run) => run(backend));
});
