import { GetObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CorruptStateError } from "../errors.js";
import type { Fence } from "../fence.js";
import { FencedS3, type S3SweepProgress } from "./store.js";
import { dataKey, keyOfData, newId } from "../cas/layout.js";
import { decodeManifest, mayBeNamed } from "../cas/manifest.js";
import { answered, fakeError, holdFirst, intercept, isDataUpload, isManifestPut, listKeys } from "./wire-test-support.js";

let server: StartedS3;
let client: S3Client;

beforeAll(async () => {
  server = await startS3();
  client = server.client();
});
afterAll(async () => {
  await server?.stop();
});

const fence: Fence = { resource: "sweep", token: 1n };
/** Every body here goes to a data object. */
const options = { inlineLimit: 0 };

/**
 * A writer that uploads its body and then dies: its manifest PUT, and everything after it (its
 * cleanup too), is held for good. Resolves once the PUT is held; returns the data objects it made (a
 * writer that finds the key written makes two: the upload begun as a create, then a copy named for
 * the manifest it read).
 */
async function dieBeforeManifestPut(bucket: string, key: string, body: string): Promise<string[]> {
  const dying = server.client();
  const made: string[] = [];
  let died!: () => void;
  const dead = new Promise<void>((resolve) => (died = resolve));
  let gone = false;
  const upload = answered(dying, isDataUpload);
  intercept(dying, async (info, send) => {
    if (isManifestPut(info)) {
      gone = true;
      died();
    }
    if (gone) return new Promise(() => undefined); // the process is gone: nothing more leaves it
    const creates = isDataUpload(info) || info.command === "CopyObjectCommand";
    if (creates && info.key !== undefined) made.push(info.key);
    return send();
  });
  void new FencedS3(dying, { bucket, ...options, timeoutMs: 1000 }).put(key, body, { fence }).catch(() => undefined);
  await Promise.all([upload, dead]);
  return made;
}

/**
 * A data object as a writer would leave it whose attempt's target was replaced: nothing can name it
 * once the key has a manifest (with none, a target that is a writeId is unexplained, and kept).
 */
async function orphanOf(bucket: string, key: string, body = "orphan"): Promise<string> {
  const name = dataKey("fenced/", key, newId(), newId());
  await client.send(new PutObjectCommand({ Bucket: bucket, Key: name, Body: body }));
  return name;
}

async function bodiesRead(store: FencedS3, keys: readonly string[]): Promise<Record<string, string | undefined>> {
  const out: Record<string, string | undefined> = {};
  for (const k of keys) out[k] = (await store.getBytes(k))?.body.toString();
  return out;
}

describe("FencedS3.sweep: orphaned data objects", () => {
  it("deletes the orphans of a writer that died before its manifest PUT, and keeps every current body", async () => {
    const bucket = await server.createBucket();
    const store = new FencedS3(client, { bucket, ...options });
    const keys = ["k1", "k2", "a", "a/b"];
    for (const k of keys) await store.put(k, `first ${k}`, { fence });
    const orphans = await dieBeforeManifestPut(bucket, "k1", "lost body");
    expect(orphans).toHaveLength(2);
    await store.put("k1", "second k1", { fence }); // the dead writer's target is replaced: nothing can name its bodies now
    const pendingCreate = await dieBeforeManifestPut(bucket, "never-written", "a create"); // may still land: kept
    expect(pendingCreate).toHaveLength(1);
    await store.flush();
    const before = await listKeys(client, bucket, "fenced/data/");
    expect(before).toEqual(expect.arrayContaining([...orphans, ...pendingCreate]));

    const progress: S3SweepProgress[] = [];
    const report = await store.sweep({ minAgeMs: 0, onProgress: (p) => progress.push(p) });
    expect(report).toMatchObject({
      dryRun: false,
      scanned: { objects: 7 },
      deleted: { objects: 2, bytes: 2 * "lost body".length },
      kept: { objects: 5 },
      keptBecause: { named: { objects: 5 }, young: { objects: 0 }, unrecognised: { objects: 0 } },
      uploads: { scanned: 0, aborted: 0 },
    });
    expect(progress.map((p) => p.phase)).toEqual(["data", "probes", "uploads"]);
    expect(progress.at(-1)).toEqual({ ...report, phase: "uploads", pages: 3 });
    expect(await listKeys(client, bucket, "fenced/data/")).toEqual(before.filter((k) => !orphans.includes(k)));
    expect(await bodiesRead(store, keys)).toEqual({ k1: "second k1", k2: "first k2", a: "first a", "a/b": "first a/b" });
  });

  it("keys with '/': the objects of key a/b are judged by a/b's manifest, never by a's (listing data/a/ and judging by a's manifest deletes a/b's body)", async () => {
    const bucket = await server.createBucket();
    const store = new FencedS3(client, { bucket, ...options });
    await store.put("a", "first a", { fence });
    await store.put("a", "second a", { fence });
    await store.put("a/b", "first a/b", { fence });
    const orphans = [await orphanOf(bucket, "a"), await orphanOf(bucket, "a/b")];
    await store.flush();
    const current = (await listKeys(client, bucket, "fenced/data/")).filter((k) => !orphans.includes(k));
    const bodyOfAB = current.find((k) => k.startsWith("fenced/data/a/b/"));
    expect(current).toHaveLength(2);
    expect(bodyOfAB).toBeDefined();

    // The recipe PROTOCOL.md gave before: list data/a/, read a's manifest, delete what it says nothing can name.
    const res = await client.send(new GetObjectCommand({ Bucket: bucket, Key: "fenced/manifests/a" }));
    const manifestOfA = decodeManifest("a", Buffer.from((await res.Body?.transformToByteArray()) ?? [])).header;
    const condemned = (await listKeys(client, bucket, "fenced/data/a/")).filter((k) => !mayBeNamed(k, manifestOfA));
    expect(condemned).toContain(bodyOfAB); // a/b's current body
    // The sweeper parses the key up to the last '/'.
    expect(keyOfData("fenced/", bodyOfAB ?? "")).toBe("a/b");
    expect(orphans.map((o) => keyOfData("fenced/", o))).toEqual(["a", "a/b"]);

    const report = await store.sweep({ minAgeMs: 0 });
    expect(report).toMatchObject({ deleted: { objects: 2 }, keptBecause: { named: { objects: 2 } } });
    expect(await listKeys(client, bucket, "fenced/data/")).toEqual(current);
    expect(await bodiesRead(store, ["a", "a/b"])).toEqual({ a: "second a", "a/b": "first a/b" });
  });

  it("a writer paused between its upload and its manifest PUT keeps its object through a sweep with minAgeMs: 0, resumes, and its write lands", async () => {
    const bucket = await server.createBucket();
    const pausedClient = server.client();
    const paused = new FencedS3(pausedClient, { bucket, ...options });
    await paused.put("k", "first", { fence }); // it remembers the manifest: its next upload is named for it
    const uploaded = answered(pausedClient, isDataUpload);
    const gate = holdFirst(pausedClient, isManifestPut);
    const late = paused.put("k", "second", { fence });
    await Promise.all([uploaded, gate.reached]); // its body is stored; its manifest PUT waits
    const before = await listKeys(client, bucket, "fenced/data/");
    expect(before).toHaveLength(2); // the current body, and the paused attempt's, named for the current manifest

    const report = await new FencedS3(client, { bucket }).sweep({ minAgeMs: 0 });
    expect(report).toMatchObject({ deleted: { objects: 0 }, keptBecause: { named: { objects: 2 } } });
    expect(await listKeys(client, bucket, "fenced/data/")).toEqual(before);

    gate.release();
    const landed = await late;
    expect(await paused.getBytes("k")).toMatchObject({ version: landed.version, body: Buffer.from("second") });
  });

  it("dryRun deletes nothing and reports what a sweep then deletes; the default minAgeMs (one day) keeps everything younger", async () => {
    const bucket = await server.createBucket();
    const store = new FencedS3(client, { bucket, ...options });
    for (const k of ["x", "y/z"]) await store.put(k, `body of ${k}`, { fence });
    await orphanOf(bucket, "x", "twelve bytes");
    await orphanOf(bucket, "y/z", "twelve bytes");
    // A create's, on a key that has a manifest: no create can land there again.
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: dataKey("fenced/", "x", null, newId()), Body: "orphan" }));
    await store.flush();
    const before = await listKeys(client, bucket, "fenced/data/");

    const young = await store.sweep();
    expect(young).toMatchObject({ minAgeMs: 86_400_000, deleted: { objects: 0 }, keptBecause: { young: { objects: 5 } } });
    const dry = await store.sweep({ minAgeMs: 0, dryRun: true });
    expect(await listKeys(client, bucket, "fenced/data/")).toEqual(before);
    const real = await store.sweep({ minAgeMs: 0 });
    expect(dry).toEqual({ ...real, dryRun: true });
    expect(real).toMatchObject({ deleted: { objects: 3, bytes: 12 + 12 + 6 }, kept: { objects: 2 } });
    expect(await store.sweep({ minAgeMs: 0, dryRun: true })).toMatchObject({ scanned: { objects: 2 }, deleted: { objects: 0 } });
  });

  it("pages: lists and judges one page at a time, with a progress call per page", async () => {
    const bucket = await server.createBucket();
    const store = new FencedS3(client, { bucket, ...options });
    const keys = Array.from({ length: 7 }, (_, i) => `p/${i}`);
    await Promise.all(keys.map((k) => store.put(k, `body ${k}`, { fence })));
    await Promise.all(keys.slice(0, 5).map((k) => orphanOf(bucket, k)));
    const listed: number[] = [];
    const sweeping = server.client();
    intercept(sweeping, async (info, send) => {
      const out = await send();
      if (info.command === "ListObjectsV2Command") listed.push((out as { output: { KeyCount?: number } }).output.KeyCount ?? -1);
      return out;
    });
    const progress: S3SweepProgress[] = [];
    const report = await new FencedS3(sweeping, { bucket }).sweep({ minAgeMs: 0, pageSize: 5, onProgress: (p) => progress.push(p) });
    expect(listed).toEqual([5, 5, 2, 0]); // 12 data objects, then the probes
    expect(progress.map((p) => [p.phase, p.pages, p.scanned.objects])).toEqual([
      ["data", 1, 5],
      ["data", 2, 10],
      ["data", 3, 12],
      ["probes", 4, 12],
      ["uploads", 5, 12],
    ]);
    expect(report).toMatchObject({ scanned: { objects: 12 }, deleted: { objects: 5 }, kept: { objects: 7 } });
    expect(await bodiesRead(store, keys)).toEqual(Object.fromEntries(keys.map((k) => [k, `body ${k}`])));
  });

  it("a backend that refuses DeleteObjects gets one DeleteObject per object", async () => {
    const bucket = await server.createBucket();
    const store = new FencedS3(client, { bucket, ...options });
    await store.put("k", "body", { fence });
    const orphans = [await orphanOf(bucket, "k"), await orphanOf(bucket, "k")];
    const sweeping = server.client();
    const deletes: string[] = [];
    intercept(sweeping, (info, send) => {
      if (info.command === "DeleteObjectsCommand") return Promise.reject(fakeError(400, "NotImplemented"));
      if (info.command === "DeleteObjectCommand" && info.key !== undefined) deletes.push(info.key);
      return send();
    });
    const report = await new FencedS3(sweeping, { bucket }).sweep({ minAgeMs: 0 });
    expect(report).toMatchObject({ deleted: { objects: 2 } });
    expect(deletes.sort()).toEqual([...orphans].sort());
    expect(await listKeys(client, bucket, "fenced/data/")).toHaveLength(1);
    expect((await store.getBytes("k"))?.body.toString()).toBe("body");
  });

  it("names it cannot judge are kept: a format /1 name (no target), a name without a key; a corrupt manifest stops the sweep (CorruptStateError)", async () => {
    const bucket = await server.createBucket();
    const store = new FencedS3(client, { bucket, ...options });
    await store.put("k", "body", { fence });
    for (const name of ["fenced/data/k/0123456789abcdef0123456789abcdef", "fenced/data/stray"])
      await client.send(new PutObjectCommand({ Bucket: bucket, Key: name, Body: "?" }));
    expect(await store.sweep({ minAgeMs: 0 })).toMatchObject({
      deleted: { objects: 0 },
      keptBecause: { named: { objects: 1 }, unrecognised: { objects: 2, bytes: 2 } },
    });

    const orphan = await orphanOf(bucket, "broken");
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: "fenced/manifests/broken", Body: "not a manifest" }));
    await expect(store.sweep({ minAgeMs: 0 })).rejects.toMatchObject({ name: "CorruptStateError", what: "manifest", subject: "broken" });
    await expect(store.sweep({ minAgeMs: 0 })).rejects.toBeInstanceOf(CorruptStateError);
    expect(await listKeys(client, bucket, "fenced/data/")).toContain(orphan);
  });
});
