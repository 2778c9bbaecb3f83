import { Readable } from "node:stream";
import { GetObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fence } from "../fence.js";
import { FencedS3 } from "./store.js";
import { copyData } from "./copy.js";
import { dataKey, newId, targetOf } from "../cas/layout.js";
import { judgeData, mayBeNamed, nextHeader, type ManifestHeader } from "../cas/manifest.js";
import { answerOnWire, auditManifests, fakeError, intercept, isManifestPut, listKeys, type FakeAnswer } from "./wire-test-support.js";

let server: StartedS3;
let client: S3Client;

beforeAll(async () => {
  server = await startS3();
  client = server.client();
});
afterAll(async () => {
  await server?.stop();
});

const fence: Fence = { resource: "data", token: 1n };

describe("data objects: one per manifest attempt, named for the manifest it is sent against", () => {
  it("the sweeper's rule: a data object may be named while the current manifest names it or is its attempt's target; no manifest for a writeId target is unexplained, never an orphan", () => {
    const manifest = (writeId: string, body: ManifestHeader["body"]): ManifestHeader =>
      nextHeader(undefined, "k", { resource: "r", token: 1n, holder: null }, writeId, body, undefined);
    const [w1, w2] = [newId(), newId()];
    const againstW1 = dataKey("p/", "k", w1, newId());
    const create = dataKey("p/", "k", null, newId());
    expect(targetOf(againstW1)).toBe(w1);
    expect(targetOf(create)).toBeNull();
    expect(targetOf("p/data/k/0123456789abcdef0123456789abcdef")).toBeUndefined(); // a /1 name
    const tomb: ManifestHeader["body"] = { kind: "tombstone" };
    // Its attempt's target is current: the attempt may still land.
    expect(judgeData(againstW1, manifest(w1, tomb))).toBe("named");
    // The current manifest names it.
    expect(judgeData(againstW1, manifest(w2, { kind: "object", dataKey: againstW1 }))).toBe("named");
    // The target was replaced and the current manifest names something else: nothing can name it again.
    expect(judgeData(againstW1, manifest(w2, tomb))).toBe("orphan");
    expect(mayBeNamed(againstW1, manifest(w2, tomb))).toBe(false);
    // A create lands only while the key has no manifest.
    expect(judgeData(create, null)).toBe("named");
    expect(judgeData(create, manifest(w1, tomb))).toBe("orphan");
    // Its target existed and manifests are never deleted: no manifest means the object is not this
    // store's (something else wrote under the prefix, such as another store: unsupported) or a
    // manifest was deleted by hand.
    expect(judgeData(againstW1, null)).toBe("unexplained");
    expect(mayBeNamed(againstW1, null)).toBe(true);
    // Without a target in its name, nothing is known.
    expect(judgeData("p/data/k/0123456789abcdef0123456789abcdef", manifest(w2, tomb))).toBe("unexplained");
    expect(mayBeNamed("p/data/k/0123456789abcdef0123456789abcdef", manifest(w2, tomb))).toBe(true);
  });

  it("copyData: one CopyObject, or part by part above the single-copy limit; false when the source is gone", async () => {
    const bucket = await server.createBucket();
    const body = Buffer.alloc(11 * 1024 * 1024);
    for (let i = 0; i < body.length; i += 4096) body.writeUInt32BE(i, i);
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: "src/a b+ü", Body: body, ContentType: "x/y" }));
    // Compared with equals(), not a deep equality that walks 11 MiB byte by byte.
    const read = async (key: string): Promise<{ same: boolean; type: string | undefined }> => {
      const res = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
      return { same: Buffer.from((await res.Body?.transformToByteArray()) ?? []).equals(body), type: res.ContentType };
    };
    expect(await copyData(client, bucket, "src/a b+ü", "one", body.length, "x/y", undefined)).toBe(true);
    expect(await read("one")).toEqual({ same: true, type: "x/y" });
    const parts = { single: 5 * 1024 * 1024, part: 5 * 1024 * 1024 };
    expect(await copyData(client, bucket, "src/a b+ü", "parts", body.length, "x/y", undefined, parts)).toBe(true);
    expect(await read("parts")).toEqual({ same: true, type: "x/y" });
    expect(await copyData(client, bucket, "src/missing", "nothing", body.length, undefined, undefined)).toBe(false);
    expect(await copyData(client, bucket, "src/missing", "nothing", body.length, undefined, undefined, parts)).toBe(false);
    expect(await listKeys(client, bucket)).toEqual(["one", "parts", "src/a b+ü"]);
  });

  for (const kind of ["bytes", "stream"] as const) {
    it(`a retried write (${kind}) names a fresh data object, a server-side copy; the first attempt's is deleted once its target is replaced`, async () => {
      const bucket = await server.createBucket();
      const faulty = server.client();
      const history = auditManifests(faulty);
      let failures = 2;
      intercept(faulty, (info, send) => {
        if (failures > 0 && isManifestPut(info)) {
          failures--;
          return Promise.reject(fakeError(409, "ConditionalRequestConflict"));
        }
        return send();
      });
      const copies: string[] = [];
      intercept(faulty, (info, send) => {
        if (info.command === "CopyObjectCommand" && info.key !== undefined) copies.push(info.key);
        return send();
      });
      const store = new FencedS3(faulty, { bucket, inlineLimit: 0 });
      const text = "a body that goes to a data object";
      const result = await store.put("k", kind === "bytes" ? text : Readable.from([Buffer.from(text)], { objectMode: false }), { fence });
      expect(copies).toHaveLength(2); // attempts 2 and 3 each got a copy of their own
      const landed = history.at(-1);
      expect(landed?.writeId).toBe(result.version);
      expect(landed?.body.kind === "object" && landed.body.dataKey).toBe(copies.at(-1));
      expect(landed?.body.kind === "object" && targetOf(landed.body.dataKey)).toBeNull(); // sent as a create
      expect((await store.getBytes("k"))?.body.toString()).toBe(text);
      await store.flush();
      expect(await listKeys(client, bucket, "fenced/data/")).toEqual([copies.at(-1)]);
    });
  }

  for (const refused of [false, true] as const) {
    it(`the bodies that writes replace are deleted in the background, ${refused ? "one by one where the backend refuses DeleteObjects" : "many in one DeleteObjects"}; flush() sends what is queued at once`, async () => {
      const bucket = await server.createBucket();
      const deleting = server.client();
      const deletes: string[] = [];
      intercept(deleting, (info, send) => {
        if (info.command === "DeleteObjectsCommand" || info.command === "DeleteObjectCommand") deletes.push(info.command);
        if (refused && info.command === "DeleteObjectsCommand") return Promise.reject(fakeError(501, "NotImplemented"));
        return send();
      });
      const store = new FencedS3(deleting, { bucket, inlineLimit: 0 });
      const keys = Array.from({ length: 10 }, (_, i) => `k${i}`);
      await Promise.all(keys.map((k) => store.put(k, `first ${k}`, { fence })));
      await Promise.all(keys.map((k) => store.put(k, `second ${k}`, { fence }))); // replaces 10 bodies
      await store.flush();
      expect(await listKeys(client, bucket, "fenced/data/")).toHaveLength(10); // the current bodies only
      for (const k of keys) expect((await store.getBytes(k))?.body.toString()).toBe(`second ${k}`);
      if (refused) expect(deletes.filter((d) => d === "DeleteObjectCommand")).not.toHaveLength(0);
      else expect(deletes.length).toBeLessThan(10); // fewer requests than objects deleted
    });
  }

  // An attempt answered "not applied" never lands, and nothing else can name its object: the sweeper
  // would keep it as long as its target stays current (for a create: while the key has no manifest).
  const refusals: readonly [string, FakeAnswer][] = [
    ["throttled", { status: 429, code: "SlowDown" }],
    ["a conflict", { status: 409, code: "ConditionalRequestConflict" }],
    ["fatal", { status: 403, code: "AccessDenied" }],
  ];
  for (const [what, answer] of refusals) {
    for (const create of [true, false] as const) {
      it(`every manifest PUT of ${create ? "a create" : "a write whose target stays current"} refused before it applied (${what}, ${answer.status} ${answer.code}): the writer deletes each attempt's data object`, async () => {
        const bucket = await server.createBucket();
        const store = new FencedS3(server.client(), { bucket, inlineLimit: 0 });
        if (!create) await store.put("k", "the current body", { fence });
        await store.flush();
        const before = await listKeys(client, bucket, "fenced/data/");
        const refusing = server.client();
        let refused = 0;
        answerOnWire(refusing, (call) => {
          if (call.method !== "PUT" || !call.path.includes("/manifests/")) return Promise.resolve(undefined);
          refused++;
          return Promise.resolve(answer);
        });
        const writer = new FencedS3(refusing, { bucket, inlineLimit: 0, maxAttempts: 3 });
        await expect(writer.put("k", Buffer.alloc(64 * 1024, 1), { fence })).rejects.toThrow();
        await writer.flush();
        expect(refused).toBe(answer.status === 403 ? 1 : 3); // one data object each: the first uploaded, the others copies
        expect(await listKeys(client, bucket, "fenced/data/")).toEqual(before);
        expect((await store.getBytes("k"))?.body.toString()).toBe(create ? undefined : "the current body");
      });
    }
  }
});
