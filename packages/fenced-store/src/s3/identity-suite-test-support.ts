import { createHash, randomBytes } from "node:crypto";
import { PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResourceMismatchError, StaleTokenError } from "../errors.js";
import type { Fence } from "../fence.js";
import { FencedS3 } from "./store.js";
import { contents } from "./wire-test-support.js";
import type { StartBackend } from "./backend-test-support.js";

/** The suite, against the backend `start` gives (backend-test-support.ts). */
export function identitySuite(start: StartBackend): void {
  let server: Awaited<ReturnType<StartBackend>>;
  let client: S3Client;

  beforeAll(async () => {
    server = await start();
    client = server.client();
  });
  afterAll(async () => {
    await server?.stop();
  });

  const h1: Fence = { resource: "reports", token: 4n, holder: "h1" };
  const h2: Fence = { resource: "reports", token: 4n, holder: "h2" };

  async function refusal(write: Promise<unknown>): Promise<unknown> {
    return write.then(
      () => undefined,
      (e: unknown) => e,
    );
  }

  describe("FencedS3: which lease presented the token (holder)", () => {
    for (const checkResourceFence of [true, false]) {
      it(`same key, equal token from another holder is refused and changes nothing (checkResourceFence: ${checkResourceFence})`, async () => {
        const bucket = await server.createBucket();
        const store = new FencedS3(client, { bucket, checkResourceFence, inlineLimit: 0 });
        await store.put("k", "from h1", { fence: h1 });
        const before = await contents(client, bucket);
        // A fresh store (nothing cached) and the store that wrote: both must be refused by what is stored.
        for (const writer of [store, new FencedS3(client, { bucket, checkResourceFence })]) {
          const writes: [string, () => Promise<unknown>][] = [
            ["put", () => writer.put("k", "from h2", { fence: h2 })],
            ["delete", () => writer.delete("k", { fence: h2 })],
            ["update", () => writer.update("k", () => "from h2", { fence: h2 })],
          ];
          for (const [what, write] of writes) {
            const err = await refusal(write());
            expect(err, what).toBeInstanceOf(StaleTokenError);
            expect(err, what).toMatchObject({ resource: "reports", token: 4n, highest: 4n, highestHolder: "h1" });
          }
          await writer.flush();
        }
        expect(await contents(client, bucket)).toEqual(before);
        expect(await store.getBytes("k")).toMatchObject({ token: 4n, holder: "h1" });
        // The holder of token 4 writes again.
        await store.put("k", "h1 again", { fence: h1 });
        const stored = await store.getBytes("k");
        expect(stored?.body.toString()).toBe("h1 again");
        expect(stored).toMatchObject({ token: 4n, holder: "h1", resource: "reports" });
      });
    }

    it("across keys of the resource: h1 registers token 4, h2 with token 4 is refused on a key h1 never wrote", async () => {
      const bucket = await server.createBucket();
      const store = new FencedS3(client, { bucket });
      await store.register(h1);
      const before = await contents(client, bucket);
      const fresh = new FencedS3(client, { bucket });
      for (const writer of [store, fresh]) {
        const err = await refusal(writer.put("other-key", "from h2", { fence: h2 }));
        expect(err).toBeInstanceOf(StaleTokenError);
        expect(err).toMatchObject({ token: 4n, highest: 4n, highestHolder: "h1" });
        await expect(writer.register(h2)).rejects.toMatchObject({ name: "StaleTokenError", highest: 4n, highestHolder: "h1" });
      }
      expect(await contents(client, bucket)).toEqual(before);
      // h1 writes: first the key it registered for, then one written by nobody.
      await store.put("other-key", "from h1", { fence: h1 });
      await store.register(h1); // the same lease registering again is a no-op, not a refusal
      expect(await fresh.getBytes("other-key")).toMatchObject({ holder: "h1", token: 4n });
      // And once h1 has written a key, h2 is refused there too.
      await store.put("written", "h1", { fence: h1 });
      await expect(fresh.put("third", "h2", { fence: h2 })).rejects.toBeInstanceOf(StaleTokenError);
    });
  });

  describe("FencedS3: a key belongs to the resource that created it", () => {
    // The rule itself (refusals under another resource, transfer fenced on both sides) is the conformance
    // suite's (../conformance/), inline and as data objects; here, what S3 adds: update(), the content type.
    for (const inlineLimit of [65_536, 0]) {
      it(`update() under another resource is refused and changes nothing; transfer() carries the content type (inlineLimit ${inlineLimit})`, async () => {
        const bucket = await server.createBucket();
        const store = new FencedS3(client, { bucket, inlineLimit });
        const r34: Fence = { resource: "R", token: 34n, holder: "r-34" };
        const s0: Fence = { resource: "S", token: 0n };
        const created = await store.put("k", "owned by R", { fence: r34, contentType: "text/plain" });
        const before = await contents(client, bucket);
        for (const writer of [store, new FencedS3(client, { bucket, inlineLimit })]) {
          const err = await refusal(writer.update("k", () => "from S", { fence: s0 }));
          expect(err).toBeInstanceOf(ResourceMismatchError);
          expect(err).toMatchObject({ key: "k", resource: "S", owner: "R" });
          await writer.flush();
        }
        // No manifest change, no fence object for S, no data object left behind.
        expect(await contents(client, bucket)).toEqual(before);
        const moved = await store.transfer("k", { from: r34, to: s0, ifVersion: created.version });
        const now = await new FencedS3(client, { bucket }).getBytes("k");
        expect(now).toMatchObject({ version: moved?.version, resource: "S", token: 0n, holder: null, contentType: "text/plain" });
        expect(now?.body.toString()).toBe("owned by R");
        await store.flush();
      });
    }

    it("transfer of a key never written resolves undefined and writes nothing (with ifVersion: VersionMismatchError); its arguments are checked before any I/O", async () => {
      const bucket = await server.createBucket();
      const store = new FencedS3(client, { bucket });
      expect(await store.transfer("nothing", { from: { resource: "A", token: 1n }, to: { resource: "B", token: 1n } })).toBeUndefined();
      expect(await store.get("nothing")).toBeUndefined();
      await expect(
        store.transfer("nothing", { from: { resource: "A", token: 1n }, to: { resource: "B", token: 1n }, ifVersion: "0".repeat(32) }),
      ).rejects.toMatchObject({
        name: "VersionMismatchError",
        actual: undefined,
      });
      await expect(store.transfer("k", { from: { resource: "A", token: 1n }, to: { resource: "A", token: 2n } })).rejects.toMatchObject({
        name: "InvalidArgumentError",
        argument: "options.to.resource",
      });
      await expect(store.transfer("k", { from: { resource: "A", token: -1n }, to: { resource: "B", token: 1n } })).rejects.toMatchObject({
        name: "InvalidArgumentError",
        argument: "options.from.token",
      });
      expect(await contents(client, bucket)).toEqual({});
    });
  });

  describe("FencedS3: objects written in format /1", () => {
    it("read with every holder null and the key owned by the resource of its last write; the next write is /2", async () => {
      const bucket = await server.createBucket();
      const put = (key: string, body: string): Promise<unknown> =>
        client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
      const id = (): string => randomBytes(16).toString("hex");
      const header = {
        format: "fenced-s3-manifest/1",
        key: "k",
        writeId: id(),
        seq: 3,
        resource: "R",
        token: "5",
        tokens: [
          ["Q", "40"],
          ["R", "5"],
        ],
        body: { kind: "inline", size: 7 },
        writtenAt: new Date().toISOString(),
      };
      await put("fenced/manifests/k", `${JSON.stringify(header)}\nfrom /1`);
      const fenceOf = (resource: string): string => `fenced/fences/${createHash("sha256").update(resource).digest("hex")}`;
      await put(fenceOf("R"), JSON.stringify({ format: "fenced-s3-fence/1", resource: "R", token: "5", writeId: id() }));
      const store = new FencedS3(client, { bucket });

      expect(await store.getBytes("k")).toMatchObject({ version: header.writeId, token: 5n, holder: null, resource: "R" });
      // Token 5 of /1 was presented by a holder nobody recorded: a holder now cannot claim it ...
      await expect(store.put("k", "h", { fence: { resource: "R", token: 5n, holder: "h" } })).rejects.toMatchObject({
        name: "StaleTokenError",
        highest: 5n,
        highestHolder: null,
      });
      await expect(store.register({ resource: "R", token: 5n, holder: "h" })).rejects.toMatchObject({
        name: "StaleTokenError",
        highestHolder: null,
      });
      // ... the key belongs to R, whatever other resources wrote it before ...
      await expect(store.put("k", "q", { fence: { resource: "Q", token: 41n } })).rejects.toMatchObject({
        name: "ResourceMismatchError",
        owner: "R",
      });
      // ... and a fence without a holder, identified by its token alone, is admitted as before.
      await store.put("k", "five", { fence: { resource: "R", token: 5n } });
      const stored = await contents(client, bucket, "fenced/manifests/");
      const written = JSON.parse((stored["fenced/manifests/k"] ?? "").split("\n")[0] ?? "{}") as Record<string, unknown>;
      expect(written).toMatchObject({
        format: "fenced-s3-manifest/2",
        owner: "R",
        seq: 4,
        token: "5",
        holder: null,
        ratchet: [
          ["Q", "40", null],
          ["R", "5", null],
        ],
      });
      await store.register({ resource: "R", token: 6n, holder: "h" });
      const fence = await contents(client, bucket, "fenced/fences/");
      expect(JSON.parse(fence[fenceOf("R")] ?? "{}")).toMatchObject({ format: "fenced-s3-fence/2", token: "6", holder: "h" });
    });
  });
}
