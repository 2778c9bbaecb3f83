import { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import {
  CreateMultipartUploadCommand,
  ListMultipartUploadsCommand,
  PutObjectCommand,
  UploadPartCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import { InvalidArgumentError } from "@fenced/fence";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { StoreUnavailableError } from "../errors.js";
import { FencedS3, type S3SweepProgress } from "./store.js";
import { dataKey, newId } from "../cas/layout.js";
import { fakeError, holdFirst, intercept, listKeys } from "./wire-test-support.js";

let server: StartedS3;
let client: S3Client;

beforeAll(async () => {
  server = await startS3();
  client = server.client();
});
afterAll(async () => {
  await server?.stop();
});

const MiB = 1024 * 1024;

/** A multipart upload left as a writer killed mid-upload leaves it: created, one part stored, never completed. */
async function abandonedUpload(bucket: string, name: string): Promise<void> {
  const { UploadId } = await client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: name }));
  await client.send(new UploadPartCommand({ Bucket: bucket, Key: name, UploadId, PartNumber: 1, Body: Buffer.alloc(MiB, 1) }));
}

async function uploadsIn(bucket: string): Promise<string[]> {
  const res = await client.send(new ListMultipartUploadsCommand({ Bucket: bucket }));
  return (res.Uploads ?? []).map((u) => u.Key ?? "").sort();
}

/** The version a key's manifest is at. */
async function versionOf(store: FencedS3, key: string): Promise<string> {
  const found = await store.getBytes(key);
  if (found === undefined) throw new Error(`${key} has no body`);
  return found.version;
}

describe("FencedS3.sweep: incomplete multipart uploads and verify()'s probes", () => {
  it("an upload is aborted only when its key's manifest, read after the listing, says nothing can name it; however old, one whose target is current, or a create's on a key with no manifest, is kept", async () => {
    const bucket = await server.createBucket();
    const store = new FencedS3(client, { bucket });
    const fence = { resource: "sweep", token: 1n };
    await store.put("current", "v1", { fence });
    await store.put("replaced", "v1", { fence });
    const replacedTarget = await versionOf(store, "replaced");
    await store.put("replaced", "v2", { fence });
    await store.put("taken", "v1", { fence });
    const named = [dataKey("fenced/", "current", await versionOf(store, "current"), newId()), dataKey("fenced/", "created", null, newId())];
    const orphans = [dataKey("fenced/", "replaced", replacedTarget, newId()), dataKey("fenced/", "taken", null, newId())];
    const unrecognised = [
      "fenced/data/stray", // no key
      "fenced/data/k/0123456789abcdef0123456789abcdef", // a /1 name: no target
      dataKey("fenced/", "ghost", newId(), newId()), // a writeId target, and no manifest: not this store's
    ];
    for (const name of [...named, ...orphans, ...unrecognised, "elsewhere/not-the-stores"]) await abandonedUpload(bucket, name);
    await sleep(1200);
    const young = dataKey("fenced/", "replaced", replacedTarget, newId());
    await abandonedUpload(bucket, young);

    const kept = { named: 2, young: 1, unrecognised: 3 };
    expect(await store.sweep({ minAgeMs: 1000 })).toMatchObject({ uploads: { scanned: 8, aborted: 2, kept } });
    const left = ["elsewhere/not-the-stores", ...named, ...unrecognised, young].sort();
    expect(await uploadsIn(bucket)).toEqual(left);
    expect(await store.sweep({ minAgeMs: 0, dryRun: true })).toMatchObject({
      uploads: { scanned: 6, aborted: 1, kept: { named: 2, young: 0, unrecognised: 3 } },
    });
    expect(await uploadsIn(bucket)).toEqual(left);
    const progress: S3SweepProgress[] = [];
    const report = await store.sweep({ minAgeMs: 0, pageSize: 2, onProgress: (p) => progress.push(p) });
    expect(report.uploads).toEqual({ scanned: 6, aborted: 1, kept: { named: 2, young: 0, unrecognised: 3 } });
    expect(progress.filter((p) => p.phase === "uploads").map((p) => p.uploads.scanned)).toEqual([2, 4, 6]);
    expect(await uploadsIn(bucket)).toEqual(left.filter((name) => name !== young));
    expect(await listKeys(client, bucket, "fenced/data/")).toEqual([]); // nothing was completed
  });

  it("a stream whose multipart upload a sweep aborts (its create's key was written meanwhile) fails before any manifest names it", async () => {
    const bucket = await server.createBucket();
    const writerClient = server.client();
    const completing = holdFirst(writerClient, (info) => info.command === "CompleteMultipartUploadCommand");
    const writer = new FencedS3(writerClient, { bucket, partSize: 5 * MiB });
    const body = Readable.from([Buffer.alloc(6 * MiB, 2)], { objectMode: false }); // unknown length: two parts
    const put = writer.put("streamed", body, { fence: { resource: "sweep", token: 1n } });
    await completing.reached;
    const store = new FencedS3(client, { bucket });
    // While the key has no manifest, the create may still land: its upload is kept, however old.
    expect(await store.sweep({ minAgeMs: 0 })).toMatchObject({ uploads: { scanned: 1, aborted: 0, kept: { named: 1 } } });
    const other = await store.put("streamed", "another writer's", { fence: { resource: "sweep", token: 2n } });
    expect(await store.sweep({ minAgeMs: 0 })).toMatchObject({ uploads: { scanned: 1, aborted: 1 } });
    completing.release();
    await expect(put).rejects.toThrow(); // its CompleteMultipartUpload is refused (radosgw: StoreUnavailableError)
    expect((await writer.getBytes("streamed"))?.version).toBe(other.version);
    expect(await listKeys(client, bucket, "fenced/manifests/")).toEqual(["fenced/manifests/streamed"]);
    expect(await listKeys(client, bucket, "fenced/data/")).toEqual([]);
    expect(await uploadsIn(bucket)).toEqual([]);
  });

  it("verify()'s leftover probe is deleted once an hour old by the sweeper's clock (and older than minAgeMs and timeoutMs); a clock 59 minutes ahead keeps it; other names under probe/ are kept", async () => {
    const bucket = await server.createBucket();
    const probing = server.client();
    // The process dies before verify() cleans up: its deletions never reach the server.
    intercept(probing, (info, send) =>
      info.command === "DeleteObjectCommand" && info.key?.includes("/probe/") === true
        ? Promise.reject(fakeError(500, "InternalError"))
        : send(),
    );
    await new FencedS3(probing, { bucket }).verify();
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: "fenced/probe/notes.txt", Body: "kept" }));
    const [probe] = (await listKeys(client, bucket, "fenced/probe/")).filter((k) => !k.endsWith("notes.txt"));
    expect(probe).toMatch(/^fenced\/probe\/[0-9a-f]{32}$/);

    const store = new FencedS3(client, { bucket, timeoutMs: 1000 });
    // A verify() may still be running until its deadline has passed: younger than timeoutMs, kept even with minAgeMs: 0.
    expect(await store.sweep({ minAgeMs: 0 })).toMatchObject({
      deleted: { objects: 0 },
      keptBecause: { young: { objects: 1 }, unrecognised: { objects: 1 } },
    });
    await sleep(1100);
    // The sweeper's clock runs ahead of the server's (its client signs with the server's time, as the
    // SDK's skew correction makes it): the probe, a second old by the server's clock, looks 59
    // minutes old. Kept: it is not yet an hour old.
    const skewed = server.client();
    const sweeper = new FencedS3(skewed, { bucket, timeoutMs: 1000 });
    const now = Date.now.bind(Date);
    const ahead = vi.spyOn(Date, "now");
    try {
      for (const [minutes, deleted] of [
        [59, 0],
        [61, 1],
      ] as const) {
        ahead.mockImplementation(() => now() + minutes * 60_000);
        skewed.config.systemClockOffset = -minutes * 60_000;
        expect(await sweeper.sweep({ minAgeMs: 0 })).toMatchObject({
          deleted: { objects: deleted },
          keptBecause: { young: { objects: 1 - deleted } },
        });
      }
    } finally {
      ahead.mockRestore();
    }
    expect(await listKeys(client, bucket, "fenced/probe/")).toEqual(["fenced/probe/notes.txt"]);
  });
});

describe("FencedS3.sweep: arguments, deadlines and failures", () => {
  it("bad options: InvalidArgumentError before any request (minAgeMs names milliseconds)", async () => {
    const sweeping = server.client();
    let requests = 0;
    intercept(sweeping, (_info, send) => {
      requests++;
      return send();
    });
    const store = new FencedS3(sweeping, { bucket: await server.createBucket() });
    const bad: unknown[] = [
      "everything",
      { minAgeMs: -1 },
      { minAgeMs: 1.5 },
      { minAgeMs: "86400000" },
      { minAgeMs: 3651 * 86_400_000 },
      { dryRun: "yes" },
      { concurrency: 0 },
      { concurrency: 65 },
      { pageSize: 1001 },
      { onProgress: "stderr" },
      { signal: "stop" },
    ];
    for (const options of bad) await expect(store.sweep(options as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(store.sweep({ minAgeMs: -1 })).rejects.toThrow(/milliseconds/);
    const reason = new Error("stopped by the caller");
    await expect(store.sweep({ signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect(requests).toBe(0);
  });

  it("every request is bounded by timeoutMs; a failure is thrown typed; the caller's abort throws its reason; so does onProgress's error", async () => {
    const bucket = await server.createBucket();
    const failing = server.client();
    let fault: "hang" | "throttle" | undefined;
    intercept(failing, (info, send) => {
      if (info.command !== "ListObjectsV2Command" || fault === undefined) return send();
      return fault === "hang" ? new Promise(() => undefined) : Promise.reject(fakeError(503, "SlowDown"));
    });
    const store = new FencedS3(failing, { bucket, timeoutMs: 300 });

    fault = "hang";
    const started = performance.now();
    const hung: unknown = await store.sweep({ minAgeMs: 0 }).catch((e: unknown) => e);
    expect(hung).toBeInstanceOf(StoreUnavailableError);
    expect(hung).toMatchObject({ reason: "timeout", operation: "sweep" });
    expect(performance.now() - started).toBeLessThan(1000);
    fault = "throttle";
    await expect(store.sweep({ minAgeMs: 0 })).rejects.toMatchObject({ name: "StoreUnavailableError", reason: "throttled" });

    fault = undefined;
    const controller = new AbortController();
    const reason = new Error("enough");
    const stopped = store.sweep({ minAgeMs: 0, signal: controller.signal, onProgress: () => controller.abort(reason) });
    await expect(stopped).rejects.toBe(reason);
    const mine = new Error("the progress printer failed");
    await expect(
      store.sweep({
        onProgress: () => {
          throw mine;
        },
      }),
    ).rejects.toBe(mine);
  });
});
