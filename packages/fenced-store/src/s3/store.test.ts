import { Readable } from "node:stream";
import { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError } from "@fenced/fence";
import { CorruptStateError, StaleTokenError, VersionMismatchError } from "../errors.js";
import { MAX_TOKEN, type Fence } from "../fence.js";
import { FencedS3 } from "./store.js";
import { ConditionalObjects } from "./conditional.js";
import { portSuite } from "../conditional/port-suite-test-support.js";
import { fakeError, holdFirst, ignoreConditions, intercept, isManifestPut, listKeys } from "./wire-test-support.js";

let server: StartedS3;
let client: S3Client;

beforeAll(async () => {
  server = await startS3();
  client = server.client();
});
afterAll(async () => {
  await server?.stop();
});

const fence = (token: bigint | number, resource = "reports"): Fence => ({ resource, token: BigInt(token) });

async function newStore(options: { inlineLimit?: number } = {}): Promise<{ bucket: string; store: FencedS3 }> {
  const bucket = await server.createBucket();
  return { bucket, store: new FencedS3(client, { bucket, ...options }) };
}

async function text(store: FencedS3, key: string): Promise<string | undefined> {
  return (await store.getBytes(key))?.body.toString("utf8");
}

describe("FencedS3 against a real S3 server", () => {
  it("verify() passes on the real server and fails loudly on one that ignores conditions", async () => {
    const { bucket, store } = await newStore();
    const result = await store.verify();
    expect(["bare", "quoted"]).toContain(result.etagForm);
    expect(await listKeys(client, bucket)).toEqual([]); // the probe cleans up after itself

    const ignoring = server.client();
    ignoreConditions(ignoring);
    await expect(new FencedS3(ignoring, { bucket }).verify()).rejects.toThrow(/does not honour conditional writes/);

    // Fence reads are conditional: a backend that answers 304 Not Modified to any If-None-Match would
    // hand a store the fence it saw last, however high the fence has risen since.
    const alwaysNotModified = server.client();
    intercept(alwaysNotModified, (info, send) =>
      info.command === "GetObjectCommand" && info.input.IfNoneMatch !== undefined ? Promise.reject(fakeError(304, "NotModified")) : send(),
    );
    await expect(new FencedS3(alwaysNotModified, { bucket }).verify()).rejects.toThrow(/If-None-Match on a replaced ETag/);
    expect(await listKeys(client, bucket)).toEqual([]);
  });

  it("the article's figure: 33 pauses before its write, 34 writes, 33 resumes and is refused", async () => {
    for (const inlineLimit of [65_536, 0]) {
      const { bucket, store } = await newStore({ inlineLimit });
      await store.put("reports/q3.csv", "from 32", { fence: fence(32) });

      // Client 1 (token 33) has read the manifest and passed every check when its process pauses,
      // just before the compare-and-swap goes out.
      const pausedClient = server.client();
      const gate = holdFirst(pausedClient, isManifestPut);
      const paused = new FencedS3(pausedClient, { bucket, inlineLimit }).put("reports/q3.csv", "from 33", { fence: fence(33) });
      await gate.reached;
      await store.put("reports/q3.csv", "from 34", { fence: fence(34) });
      gate.release();

      const err: unknown = await paused.catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StaleTokenError);
      expect(err).toMatchObject({ resource: "reports", token: 33n, highest: 34n });
      const stored = await store.getBytes("reports/q3.csv");
      expect(stored?.body.toString()).toBe("from 34");
      expect(stored?.token).toBe(34n);
      await store.flush();
      // 33's data object (when not inline) was removed, and so was 32's superseded one.
      const data = await listKeys(client, bucket, "fenced/data/");
      expect(data.length).toBe(inlineLimit === 0 ? 1 : 0);
    }
  });

  it("ABA: a naive layout (token in metadata, If-Match on the data ETag) rolls the token back; FencedS3 refuses", async () => {
    const { bucket, store } = await newStore();
    const { etagForm } = await store.verify();
    const spell = (etag: string): string => (etagForm === "bare" ? etag.replaceAll('"', "") : etag);
    const naivePut = (body: string, token: bigint, ifMatch?: string) =>
      client.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: "naive",
          Body: body,
          Metadata: { token: token.toString() },
          ...(ifMatch === undefined ? {} : { IfMatch: spell(ifMatch) }),
        }),
      );
    const naiveRead = async () => {
      const r = await client.send(new HeadObjectCommand({ Bucket: bucket, Key: "naive" }));
      return { etag: r.ETag ?? "", token: BigInt(r.Metadata?.token ?? "-1") };
    };

    await naivePut("same bytes", 33n);
    const staleView = await naiveRead(); // 33 reads: its token 33 >= 33, fine; then it pauses
    const newerView = await naiveRead();
    expect(34n >= newerView.token).toBe(true);
    await naivePut("same bytes", 34n, newerView.etag); // 34 rewrites identical bytes
    expect((await naiveRead()).etag).toBe(staleView.etag); // same bytes, same ETag: the trap
    await naivePut("stale bytes", 33n, staleView.etag); // 33 resumes: its If-Match still passes
    expect((await naiveRead()).token).toBe(33n); // the token went backwards: the naive layout lost

    await store.put("k", "same bytes", { fence: fence(33) });
    const manifestEtag = async () => (await client.send(new HeadObjectCommand({ Bucket: bucket, Key: "fenced/manifests/k" }))).ETag;
    const before = await manifestEtag();
    const pausedClient = server.client();
    const gate = holdFirst(pausedClient, isManifestPut);
    const stale = new FencedS3(pausedClient, { bucket }).put("k", "stale bytes", { fence: fence(33) });
    await gate.reached;
    await store.put("k", "same bytes", { fence: fence(34) });
    expect(await manifestEtag()).not.toBe(before); // identical body bytes, yet a new manifest ETag
    gate.release();
    await expect(stale).rejects.toMatchObject({ name: "StaleTokenError", highest: 34n });
    const stored = await store.getBytes("k");
    expect(stored).toMatchObject({ token: 34n });
    expect(stored?.body.toString()).toBe("same bytes");
  });

  it("both paused: the ratchet alone loses an update; ifVersion, update() and register() do not", async () => {
    const { store } = await newStore();
    const n = async (key: string) => Number(await text(store, key));
    const increment = (old: { body: Buffer } | undefined) => String(Number(old?.body.toString() ?? "0") + 1);

    // Each scenario has its own resource: the resource fence is shared by all keys of a resource.
    // Ratchet alone: 33 and 34 both read 0, then write in increasing token order. Both are accepted.
    await store.put("alone", "0", { fence: fence(32, "alone") });
    const read33 = await store.getBytes("alone");
    const read34 = await store.getBytes("alone");
    await store.put("alone", increment(read33), { fence: fence(33, "alone") });
    await store.put("alone", increment(read34), { fence: fence(34, "alone") });
    expect(await n("alone")).toBe(1); // two acknowledged increments, one survives: the lost update

    // ifVersion: 34's write is refused because the key moved since 34 read it.
    await store.put("versioned", "0", { fence: fence(32, "versioned") });
    const v33 = await store.getBytes("versioned");
    const v34 = await store.getBytes("versioned");
    await store.put("versioned", increment(v33), { fence: fence(33, "versioned"), ifVersion: v33?.version ?? "" });
    const refused = await store
      .put("versioned", increment(v34), { fence: fence(34, "versioned"), ifVersion: v34?.version ?? "" })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(VersionMismatchError);
    expect(await n("versioned")).toBe(1);
    const again = await store.getBytes("versioned");
    await store.put("versioned", increment(again), { fence: fence(34, "versioned"), ifVersion: again?.version ?? "" });
    expect(await n("versioned")).toBe(2);

    // update(): 34 computes from a stale read, its write conflicts, it re-reads and computes again.
    await store.put("updated", "0", { fence: fence(32, "updated") });
    let release!: () => void;
    const thirtyThreeDone = new Promise<void>((r) => (release = r));
    let calls34 = 0;
    const u34 = store.update(
      "updated",
      async (old) => {
        calls34++;
        if (calls34 === 1) await thirtyThreeDone; // both have read 0
        return increment(old);
      },
      { fence: fence(34, "updated") },
    );
    await new Promise((r) => setTimeout(r, 50));
    await store.update("updated", increment, { fence: fence(33, "updated") });
    release();
    await u34;
    expect(calls34).toBe(2);
    expect(await n("updated")).toBe(2);

    // register() at acquisition: 34 fences the resource before reading, so 33's late write is refused.
    await store.put("registered", "0", { fence: fence(32, "other") });
    const r33 = await store.getBytes("registered");
    await store.register(fence(34, "other"));
    const r34 = await store.getBytes("registered");
    await expect(store.put("registered", increment(r33), { fence: fence(33, "other") })).rejects.toMatchObject({
      name: "StaleTokenError",
      highest: 34n,
    });
    await store.put("registered", increment(r34), { fence: fence(34, "other") });
    expect(await n("registered")).toBe(1); // one acknowledged increment, present
  });

  it("32 concurrent writers with increasing tokens doing update(): no acknowledged write is lost", async () => {
    const { store } = await newStore();
    const writers = Array.from({ length: 32 }, (_, i) => BigInt(i + 1));
    const outcomes = await Promise.allSettled(
      writers.map((token) =>
        new FencedS3(client, { bucket: store.bucket }).update(
          "log",
          (old) => JSON.stringify([...(JSON.parse(old?.body.toString() ?? "[]") as string[]), token.toString()]),
          { fence: fence(token, "log") },
        ),
      ),
    );
    const acknowledged = writers.filter((_, i) => outcomes[i]?.status === "fulfilled");
    for (const [i, o] of outcomes.entries()) {
      // radosgw answers the loser of a race with 500, which reads as a lost answer: with such an attempt
      // open (its slot may have been taken by it, then overwritten) the store says OutcomeUnknownError.
      // No answer is lost here, so it did not land: the log below holds exactly the acknowledged ones.
      if (o.status === "rejected")
        expect(["StaleTokenError", "OutcomeUnknownError"], `writer ${i + 1}: ${String(o.reason)}`).toContain((o.reason as Error).name);
    }
    const log = (JSON.parse((await text(store, "log")) ?? "[]") as string[]).map(BigInt);
    expect(log).toEqual(acknowledged); // every acknowledged update is present, in increasing token order
    expect(acknowledged).toContain(32n); // the highest token can never be refused
  });

  it("tombstones: delete hides the key, keeps the ratchet, and is itself fenced", async () => {
    const { bucket, store } = await newStore({ inlineLimit: 0 });
    const first = await store.put("doc", "v1", { fence: fence(5), contentType: "text/plain" });
    expect(await store.get("doc")).toMatchObject({ version: first.version, token: 5n, contentType: "text/plain", size: 2 });
    await expect(store.delete("doc", { fence: fence(4) })).rejects.toBeInstanceOf(StaleTokenError);
    await expect(store.delete("doc", { fence: fence(6), ifVersion: "0".repeat(32) })).rejects.toBeInstanceOf(VersionMismatchError);
    const gone = await store.delete("doc", { fence: fence(6), ifVersion: first.version });
    expect(await store.get("doc")).toBeUndefined();
    expect(await store.getBytes("doc")).toBeUndefined();
    // The manifest's own ratchet refuses it, without help from the resource fence.
    const objectOnly = new FencedS3(client, { bucket, checkResourceFence: false });
    await expect(objectOnly.put("doc", "late", { fence: fence(5) })).rejects.toMatchObject({ highest: 6n });
    await store.flush();
    expect(await listKeys(client, bucket, "fenced/data/")).toEqual([]); // v1's data went with the tombstone
    const back = await store.put("doc", "v2", { fence: fence(6), ifVersion: gone.version });
    expect(await text(store, "doc")).toBe("v2");
    expect(back.version).not.toBe(gone.version);
  });

  it("streams: known and unknown length, read back as a stream; superseded data objects are removed", async () => {
    const { bucket, store } = await newStore();
    const big = Buffer.alloc(11 * 1024 * 1024);
    for (let i = 0; i < big.length; i += 4096) big.writeUInt32BE(i, i);
    const chunks = function* () {
      for (let i = 0; i < big.length; i += 1 << 20) yield big.subarray(i, i + (1 << 20));
    };
    await store.put("blob", Readable.from(chunks(), { objectMode: false }), { fence: fence(1), contentType: "application/octet-stream" });
    const got = await store.get("blob");
    expect(got?.size).toBe(big.length);
    const parts: Buffer[] = [];
    for await (const c of got?.body ?? []) parts.push(c as Buffer);
    expect(Buffer.concat(parts).equals(big)).toBe(true);

    await store.put("blob", Readable.from(chunks(), { objectMode: false }), { fence: fence(1), contentLength: big.length });
    // An object-mode stream of buffers is a body too; one that yields anything else fails the write.
    await store.put("small-stream", Readable.from([Buffer.from("a"), "b"]), { fence: fence(1) });
    expect(await text(store, "small-stream")).toBe("ab");
    await expect(store.put("objects", Readable.from([Buffer.from("a"), { not: "bytes" }]), { fence: fence(1) })).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    expect(await store.get("objects")).toBeUndefined();
    await store.put("blob", "small now", { fence: fence(2) });
    await store.flush();
    // Left: the one data object still referenced (a stream always gets one); blob's two are gone,
    // and so is the refused write's.
    const owners = (await listKeys(client, bucket, "fenced/data/")).map((k) => k.split("/").slice(2, -1).join("/"));
    expect(owners).toEqual(["small-stream"]);
    expect(await text(store, "blob")).toBe("small now");
  });

  it("a data object deleted by hand while its manifest names it: get(), getBytes() and update() throw CorruptStateError after reading the same manifest twice, not ContentionError after maxAttempts rounds; put() and delete() replace that manifest and heal the key", async () => {
    const { bucket } = await newStore();
    const reading = server.client();
    let manifestReads = 0;
    intercept(reading, (info, send) => {
      if (info.command === "GetObjectCommand" && info.key?.includes("/manifests/") === true) manifestReads++;
      return send();
    });
    const store = new FencedS3(reading, { bucket, inlineLimit: 0 });
    await store.put("k", "a body in a data object", { fence: fence(1) });
    const [name] = await listKeys(client, bucket, "fenced/data/");
    await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: name }));

    for (const read of [() => store.get("k"), () => store.getBytes("k"), () => store.update("k", () => "new", { fence: fence(1) })]) {
      manifestReads = 0;
      const err: unknown = await read().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(CorruptStateError);
      expect(err).toMatchObject({ backend: "s3", what: "body", subject: "k" });
      expect((err as Error).message).toContain(name);
      expect(manifestReads).toBe(2);
    }

    // A write does not read the body it replaces.
    await store.put("k", "written again", { fence: fence(1) });
    expect((await store.getBytes("k"))?.body.toString()).toBe("written again");
    const [again] = await listKeys(client, bucket, "fenced/data/");
    await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: again }));
    await store.delete("k", { fence: fence(1) });
    expect(await store.getBytes("k")).toBeUndefined();
  });

  it("bad input is refused with InvalidArgumentError before any I/O; options spelled out as undefined are accepted", async () => {
    const { bucket, store } = await newStore();
    const ok = fence(1);
    const bad: [string, () => Promise<unknown>][] = [
      ["empty key", () => store.put("", "x", { fence: ok })],
      ["dot-dot segment", () => store.put("a/../b", "x", { fence: ok })],
      ["control char", () => store.put("a\u0007b", "x", { fence: ok })],
      ["over-long key", () => store.put("k".repeat(513), "x", { fence: ok })],
      ["leading slash", () => store.put("/k", "x", { fence: ok })],
      ["negative token", () => store.put("k", "x", { fence: fence(-1) })],
      ["number token", () => store.put("k", "x", { fence: { resource: "r", token: 5 as unknown as bigint } })],
      ["token too big", () => store.put("k", "x", { fence: fence(MAX_TOKEN + 1n) })],
      ["empty resource", () => store.put("k", "x", { fence: fence(1, "") })],
      ["bad holder", () => store.put("k", "x", { fence: { resource: "r", token: 1n, holder: "white space" } })],
      ["no fence", () => store.put("k", "x", {} as never)],
      ["no options", () => store.put("k", "x", undefined as never)],
      ["number body", () => store.put("k", 42 as never, { fence: ok })],
      ["null body", () => store.put("k", null as never, { fence: ok })],
      ["bad contentType", () => store.put("k", "x", { fence: ok, contentType: "" })],
      ["bad ifVersion", () => store.put("k", "x", { fence: ok, ifVersion: "nope" })],
      ["contentLength on bytes", () => store.put("k", "x", { fence: ok, contentLength: 1 })],
      ["negative contentLength", () => store.put("k", Readable.from([]), { fence: ok, contentLength: -1 })],
      ["bad signal", () => store.put("k", "x", { fence: ok, signal: {} as never })],
      ["delete bad key", () => store.delete("a//b", { fence: ok })],
      ["get bad key", () => store.get("..")],
      ["update without function", () => store.update("k", "x" as never, { fence: ok })],
      ["update bad maxAttempts", () => store.update("k", () => "x", { fence: ok, maxAttempts: 0 })],
      ["register bad fence", () => store.register(fence(-5))],
      ["transfer without to", () => store.transfer("k", { from: ok } as never)],
      ["bad bucket", () => Promise.resolve().then(() => new FencedS3(client, { bucket: "" }))],
      ["bad prefix", () => Promise.resolve().then(() => new FencedS3(client, { bucket, prefix: "no-slash" }))],
      ["bad inlineLimit", () => Promise.resolve().then(() => new FencedS3(client, { bucket, inlineLimit: -1 }))],
      ["bad checkResourceFence", () => Promise.resolve().then(() => new FencedS3(client, { bucket, checkResourceFence: "yes" as never }))],
      ["not a client", () => Promise.resolve().then(() => new FencedS3({} as never, { bucket }))],
    ];
    for (const [what, call] of bad) {
      const err: unknown = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, `${what}: ${String(err)}`).toBeInstanceOf(InvalidArgumentError);
    }
    // update's callback returning a bad body is refused before its write.
    await expect(store.update("k", () => 7 as never, { fence: ok })).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await listKeys(client, bucket)).toEqual([]);
    expect(
      (await client.send(new GetObjectCommand({ Bucket: bucket, Key: "fenced/manifests/k" })).catch(() => undefined))?.Body,
    ).toBeUndefined();

    // Every optional field may be given as undefined.
    const spelledOut = new FencedS3(client, {
      bucket,
      prefix: undefined,
      inlineLimit: undefined,
      checkResourceFence: undefined,
      maxAttempts: undefined,
      partSize: undefined,
    });
    const written = await spelledOut.put("k", "x", {
      fence: { ...ok, holder: undefined },
      ifVersion: undefined,
      contentType: undefined,
      contentLength: undefined,
      signal: undefined,
    });
    await spelledOut.delete("k", { fence: ok, ifVersion: written.version, signal: undefined });
    await spelledOut.update("k", () => "y", { fence: ok, contentType: undefined, maxAttempts: undefined, signal: undefined });
    await spelledOut.register(ok, { signal: undefined });
    expect(await text(spelledOut, "k")).toBe("y");
  });
});

describe("the conditional port on radosgw (ConditionalObjects)", () => {
  let bucket: string;
  beforeAll(async () => {
    bucket = await server.createBucket();
  });
  portSuite(() => new ConditionalObjects(client, bucket, 10_000));
});
