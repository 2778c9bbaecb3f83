import { Readable } from "node:stream";
import type { S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError } from "../errors.js";
import type { Fence } from "../fence.js";
import { FencedS3 } from "./store.js";
import {
  answered,
  contents,
  fakeError,
  holdFirst,
  intercept,
  isDataUpload,
  isFenceRead,
  isManifestPut,
  listKeys,
  onWire,
} from "./wire-test-support.js";
import type { StartBackend } from "./backend-test-support.js";

/** The suite, against the backend `start` gives (backend-test-support.ts). */
export function windowSuite(start: StartBackend): void {
  let server: Awaited<ReturnType<StartBackend>>;
  let client: S3Client;

  beforeAll(async () => {
    server = await start();
    client = server.client();
  });
  afterAll(async () => {
    await server?.stop();
  });

  const fence = (token: bigint): Fence => ({ resource: "window", token });

  /**
   * The resource fence is read again right before each manifest PUT: whatever the writer did in between
   * (uploading a body, losing a race and retrying), a token registered meanwhile refuses it on every key.
   */
  describe("FencedS3: the resource fence is read right before each manifest PUT", () => {
    const bodies: [string, () => string | Readable][] = [
      ["bytes too large to inline", () => "x".repeat(70_000)],
      ["a stream of unknown length", () => Readable.from([Buffer.from("streamed body")], { objectMode: false })],
    ];
    for (const [what, body] of bodies) {
      it(`a writer paused in its data upload (${what}) is refused after a higher token registers, on a key the newer holder never wrote`, async () => {
        const bucket = await server.createBucket();
        const newer = new FencedS3(client, { bucket });
        await newer.register(fence(33n)); // 33's lease registered on acquisition: its write needs no raise
        const pausedClient = server.client();
        const fenceRead = answered(pausedClient, isFenceRead);
        const gate = holdFirst(pausedClient, isDataUpload);
        const pausedStore = new FencedS3(pausedClient, { bucket });
        const paused = pausedStore.put("never-written-by-34", body(), { fence: fence(33n) });
        // 33 has read the fence (33 is fine) and is uploading its body when its process pauses.
        await Promise.all([fenceRead, gate.reached]);
        await newer.register(fence(34n));
        gate.release();

        const err: unknown = await paused.catch((e: unknown) => e);
        expect(err).toBeInstanceOf(StaleTokenError);
        expect(err).toMatchObject({ token: 33n, highest: 34n });
        expect(await newer.get("never-written-by-34")).toBeUndefined();
        await pausedStore.flush();
        expect(await listKeys(client, bucket, "fenced/data/")).toEqual([]); // the refused body is gone
        expect(await listKeys(client, bucket, "fenced/manifests/")).toEqual([]);
      });
    }

    it("a writer that lost a race is refused on its retry when a higher token registered meanwhile", async () => {
      const bucket = await server.createBucket();
      const racingClient = server.client();
      const newer = new FencedS3(client, { bucket });
      let armed = true;
      intercept(racingClient, async (info, send) => {
        if (armed && isManifestPut(info)) {
          armed = false;
          // The manifest PUT is refused as a conflict, and before 33 reads again, 34 registers.
          await newer.register(fence(34n));
          throw fakeError(409, "ConditionalRequestConflict");
        }
        return send();
      });
      const racing = new FencedS3(racingClient, { bucket });
      await expect(racing.put("fresh-key", "from 33", { fence: fence(33n) })).rejects.toMatchObject({
        name: "StaleTokenError",
        highest: 34n,
      });
      expect(await newer.get("fresh-key")).toBeUndefined();
    });
  });

  describe("FencedS3: the window that remains", () => {
    for (const [key, lands] of [
      ["never-written-by-34", true],
      ["written-by-34", false],
    ] as const) {
      it(`a writer paused between its last fence read and its manifest PUT, key ${key}: ${lands ? "lands (the window)" : "refused by the manifest"}`, async () => {
        const bucket = await server.createBucket();
        const newer = new FencedS3(client, { bucket });
        await newer.register(fence(33n));
        await newer.put(key, "from 33", { fence: fence(33n) });
        const pausedClient = server.client();
        const gate = holdFirst(pausedClient, isManifestPut);
        const paused = new FencedS3(pausedClient, { bucket }).put(key, "late from 33", { fence: fence(33n) });
        await gate.reached; // its fence read said 33, and its manifest PUT is on the way
        await newer.register(fence(34n));
        if (!lands) await newer.put(key, "from 34", { fence: fence(34n) });
        gate.release();
        const outcome = await paused.then(
          () => "landed",
          (e: unknown) => e,
        );
        // S3 has no conditional write spanning two objects: the manifest PUT cannot see the fence object.
        if (lands) expect(outcome).toBe("landed");
        else expect(outcome).toMatchObject({ name: "StaleTokenError", highest: 34n });
        // Once 34 has registered, a write of 33 that reads the fence afterwards is refused on every key.
        await expect(new FencedS3(client, { bucket }).put(key, "again", { fence: fence(33n) })).rejects.toBeInstanceOf(StaleTokenError);
      });
    }
  });

  /**
   * A write prepares its next requests while the previous ones are in flight (PROTOCOL.md, "The
   * write", step 6), but each goes on the wire only once what it is ordered after has answered: the
   * fence read after the data upload, the manifest PUT after the fence read, which must admit it. These
   * hold one request on the real server and watch what reaches the wire meanwhile.
   */
  describe("FencedS3: each request goes on the wire only after what it is ordered after", () => {
    const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 50)); // time for a request that did not wait to go out

    it("steady state: the manifest PUT waits for the fence read, and is never sent when that read refuses", async () => {
      const bucket = await server.createBucket();
      const newer = new FencedS3(client, { bucket });
      await newer.register(fence(33n));
      const writerClient = server.client();
      const writer = new FencedS3(writerClient, { bucket });
      // Warm: the writer remembers the key's manifest and the fence (its next fence read is conditional).
      await writer.put("never-written-by-34", "from 33", { fence: fence(33n) });
      await writer.put("never-written-by-34", "again from 33", { fence: fence(33n) });
      const before = await contents(client, bucket, "fenced/manifests/");
      const prepared: string[] = [];
      intercept(writerClient, (info, send) => {
        if (isManifestPut(info)) prepared.push(info.command);
        return send();
      });
      const wire: string[] = [];
      onWire(writerClient, (r) => wire.push(`${r.method} ${r.kind}`));
      const held = holdFirst(writerClient, isFenceRead); // its process pauses before the fence read is sent

      const late = writer.put("never-written-by-34", "late from 33", { fence: fence(33n) });
      await held.reached;
      await settle();
      expect(prepared).toEqual([]); // the manifest PUT is built only on the fence read's answer ...
      expect(wire).toEqual([]); // ... and nothing is on the wire
      await newer.register(fence(34n));
      held.release();
      await expect(late).rejects.toMatchObject({ name: "StaleTokenError", token: 33n, highest: 34n });
      expect(wire).toEqual(["GET fences"]); // the fence read said 34: no PUT was made
      expect(prepared).toEqual([]);
      expect(await contents(client, bucket, "fenced/manifests/")).toEqual(before);
    });

    it("bytes too large to inline: the fence read waits for the upload's answer, the manifest PUT for the fence read", async () => {
      const bucket = await server.createBucket();
      const newer = new FencedS3(client, { bucket });
      await newer.register(fence(33n));
      const writerClient = server.client();
      const writer = new FencedS3(writerClient, { bucket });
      const big = (c: string): string => c.repeat(70_000);
      await writer.put("never-written-by-34", big("a"), { fence: fence(33n) });
      await writer.put("never-written-by-34", big("b"), { fence: fence(33n) });
      await writer.flush();
      const before = await contents(client, bucket, "fenced/manifests/");
      const wire: string[] = [];
      onWire(writerClient, (r) => wire.push(`${r.method} ${r.kind}`));
      // The upload lands on the server, but its answer is held: the writer has not heard back.
      let answer!: () => void;
      let uploaded!: () => void;
      const answerHeld = new Promise<void>((r) => (answer = r));
      const landed = new Promise<void>((r) => (uploaded = r));
      let armed = true;
      intercept(writerClient, async (info, send) => {
        if (!(armed && isDataUpload(info))) return send();
        armed = false;
        const out = await send();
        uploaded();
        await answerHeld;
        return out;
      });

      const late = writer.put("never-written-by-34", big("c"), { fence: fence(33n) });
      await landed;
      await settle();
      expect(wire).toEqual(["PUT data"]); // the fence read and the manifest PUT wait for the upload's answer
      await newer.register(fence(34n));
      answer();
      await expect(late).rejects.toMatchObject({ name: "StaleTokenError", token: 33n, highest: 34n });
      expect(wire.filter((w) => w !== "DELETE data")).toEqual(["PUT data", "GET fences"]); // (the refused body is deleted)
      expect(await contents(client, bucket, "fenced/manifests/")).toEqual(before);
    });
  });
}
