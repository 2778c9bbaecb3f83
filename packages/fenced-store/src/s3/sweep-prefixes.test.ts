import { CreateMultipartUploadCommand, ListMultipartUploadsCommand, type S3Client } from "@aws-sdk/client-s3";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fence } from "../fence.js";
import { FencedS3 } from "./store.js";
import { dataKey, newId } from "../cas/layout.js";
import { listKeys } from "./wire-test-support.js";

// Two stores in one bucket need prefixes neither of which is a prefix of the other: each store's
// sweep lists the other's objects under its `<prefix>data/` and judges them as its own. Nested
// prefixes are unsupported. The sweep keeps what no manifest of its own explains, but a body whose
// parsed key has a manifest in the sweeping store is judged against that manifest, and deleted.
let server: StartedS3;
let client: S3Client;

beforeAll(async () => {
  server = await startS3();
  client = server.client();
});
afterAll(async () => {
  await server?.stop();
});

const fence: Fence = { resource: "nested", token: 1n };

async function read(store: FencedS3, key: string): Promise<string | undefined> {
  return store.getBytes(key).then(
    (found) => found?.body.toString(),
    (err: unknown) => (err as Error).name,
  );
}

describe("FencedS3.sweep: a name whose key has no manifest although its target is a writeId is kept (unrecognised)", () => {
  it("prefix '' keeps the bodies and uploads of a store with prefix 'data/' (its key 'data/<key>' has no manifest in the outer store)", async () => {
    const bucket = await server.createBucket();
    const outer = new FencedS3(client, { bucket, prefix: "", inlineLimit: 0 });
    const inner = new FencedS3(client, { bucket, prefix: "data/", inlineLimit: 0 });
    await outer.put("o", "outer body", { fence });
    await inner.put("report", "first inner body", { fence });
    await inner.put("report", "inner body", { fence }); // its data object is named for the first version: `<writeId>.<id>`
    await inner.flush();
    const target = (await inner.getBytes("report"))?.version ?? "";
    // The inner store's upload against its current manifest, as a writer still streaming leaves it.
    const upload = dataKey("data/", "report", target, newId());
    await client.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: upload }));

    const report = await outer.sweep({ minAgeMs: 0 });
    expect(report).toMatchObject({
      deleted: { objects: 0 },
      // The inner store's body, manifest and fence object: all under "data/", none the outer store's.
      keptBecause: { named: { objects: 1 }, unrecognised: { objects: 3 } },
      uploads: { scanned: 1, aborted: 0, kept: { unrecognised: 1 } },
    });
    expect(await read(outer, "o")).toBe("outer body");
    expect(await read(inner, "report")).toBe("inner body");
    const uploads = await client.send(new ListMultipartUploadsCommand({ Bucket: bucket }));
    expect((uploads.Uploads ?? []).map((u) => u.Key)).toEqual([upload]);
  });

  it("prefix 'app/' keeps the manifest of a store with prefix 'app/data/' whose key is shaped like a data object's name", async () => {
    const bucket = await server.createBucket();
    const outer = new FencedS3(client, { bucket, prefix: "app/", inlineLimit: 0 });
    const inner = new FencedS3(client, { bucket, prefix: "app/data/", inlineLimit: 0 });
    // Its manifest, app/data/manifests/blobs/<32 hex>.<32 hex>, parses in the outer store as a data
    // object of key "manifests/blobs" sent against writeId "aaaa…": that key has no manifest there.
    const key = `blobs/${"a".repeat(32)}.${"b".repeat(32)}`;
    await inner.put(key, "small", { fence });
    const manifests = await listKeys(client, bucket, "app/data/manifests/");
    expect(manifests).toEqual([`app/data/manifests/${key}`]);

    // The manifest, and the inner store's fence object (a name without an attempt target).
    expect(await outer.sweep({ minAgeMs: 0 })).toMatchObject({ deleted: { objects: 0 }, keptBecause: { unrecognised: { objects: 2 } } });
    expect(await listKeys(client, bucket, "app/data/manifests/")).toEqual(manifests);
    expect(await read(inner, key)).toBe("small");
  });

  it("prefix 'data/' keeps the body of a key 'data/k' of a store with prefix '', written after a first version, while it has no key 'k' of its own", async () => {
    const bucket = await server.createBucket();
    const outer = new FencedS3(client, { bucket, prefix: "", inlineLimit: 0 });
    const inner = new FencedS3(client, { bucket, prefix: "data/", inlineLimit: 0 });
    await outer.put("data/k", "first", { fence });
    await outer.put("data/k", "outer body", { fence }); // data/data/k/<writeId>.<id>: key "k" of the inner store
    await outer.flush();
    expect(await inner.sweep({ minAgeMs: 0 })).toMatchObject({ deleted: { objects: 0 }, keptBecause: { unrecognised: { objects: 1 } } });
    expect(await read(outer, "data/k")).toBe("outer body");
  });
});

describe("FencedS3.sweep: nested prefixes are unsupported", () => {
  it("prefix 'data/' keeps the bodies of keys 'data/…' of a store with prefix '' only while it has no manifest for their parsed key: once it has, it deletes them", async () => {
    const bucket = await server.createBucket();
    const outer = new FencedS3(client, { bucket, prefix: "", inlineLimit: 0 });
    const inner = new FencedS3(client, { bucket, prefix: "data/" });
    await outer.put("data/a", "a create's body", { fence }); // data/data/a/absent.<id>: a create of the inner store's key "a"
    await outer.put("data/b", "first", { fence });
    await outer.put("data/b", "b's body", { fence }); // data/data/b/<writeId>.<id>
    await outer.flush();
    expect(await inner.sweep({ minAgeMs: 0 })).toMatchObject({
      deleted: { objects: 0 },
      keptBecause: { named: { objects: 1 }, unrecognised: { objects: 1 } },
    });

    // Inline bodies: the inner store's keys "a" and "b" add manifests, and no data object.
    await inner.put("a", "inner a", { fence });
    await inner.put("b", "inner b", { fence });
    expect(await inner.sweep({ minAgeMs: 0 })).toMatchObject({ deleted: { objects: 2 } });
    expect(await read(outer, "data/a")).toBe("CorruptStateError");
    expect(await read(outer, "data/b")).toBe("CorruptStateError");
  });
});
