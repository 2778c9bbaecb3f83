import type { S3Client } from "@aws-sdk/client-s3";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fence } from "../fence.js";
import { FencedS3, type S3SweepProgress } from "./store.js";
import { answered, intercept, isDataUpload, isManifestPut, listKeys } from "./test-support.js";

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
  const uploaded: string[] = [];
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
    if (creates && info.key !== undefined) uploaded.push(info.key);
    return send();
  });
  void new FencedS3(dying, { bucket, ...options, timeoutMs: 1000 }).put(key, body, { fence }).catch(() => undefined);
  await Promise.all([upload, dead]);
  return uploaded;
}

describe("FencedS3.sweep", () => {
  it("deletes an orphan of a writer that died before its manifest PUT, and keeps every current body", async () => {
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
    expect(progress.at(-1)).toMatchObject({ ...report, pages: 3 });
    const after = await listKeys(client, bucket, "fenced/data/");
    expect(after).toEqual(before.filter((k) => !orphans.includes(k)));
    expect((await store.getBytes("k1"))?.body.toString()).toBe("second k1");
    for (const k of keys.filter((k) => k !== "k1")) expect((await store.getBytes(k))?.body.toString()).toBe(`first ${k}`);
  });

  it("fence(): undefined before anything, then the highest token registered or written and its holder", async () => {
    const bucket = await server.createBucket();
    const store = new FencedS3(client, { bucket, ...options });
    expect(await store.fence("r")).toBeUndefined();
    await store.register({ resource: "r", token: 3n, holder: "h-3" });
    expect(await store.fence("r")).toEqual({ resource: "r", token: 3n, holder: "h-3" });
    await store.put("k", "body", { fence: { resource: "r", token: 5n } });
    expect(await store.fence("r")).toEqual({ resource: "r", token: 5n, holder: null });
    await store.register({ resource: "r", token: 2n ** 62n });
    expect(await store.fence("r")).toEqual({ resource: "r", token: 2n ** 62n, holder: null });
  });
});
