import type { S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fence } from "../fence.js";
import { FencedS3 } from "./store.js";
import { answerOnWire, contents, holdFirst, isFenceWrite, onWire } from "./wire-test-support.js";
import type { StartBackend } from "./backend-test-support.js";

/** The suite, against the backend `start` gives (backend-test-support.ts). */
export function fenceOrderSuite(start: StartBackend): void {
  let server: Awaited<ReturnType<StartBackend>>;
  let client: S3Client;

  beforeAll(async () => {
    server = await start();
    client = server.client();
  });
  afterAll(async () => {
    await server?.stop();
  });

  /**
   * A manifest PUT leaves only after a fence read that was sent after everything the write awaited:
   * a raise of another fence, or the SDK's backoff before retrying a throttled PUT, is awaited like an
   * upload, and a token registered meanwhile refuses the write.
   */
  describe("FencedS3: nothing the write awaits comes between the fence read and the manifest PUT", () => {
    it("transfer(): a register(from) that returned while the to fence was being raised refuses the transfer", async () => {
      const bucket = await server.createBucket();
      const from = (token: bigint): Fence => ({ resource: "order-from", token });
      const to: Fence = { resource: "order-to", token: 1n };
      const newer = new FencedS3(client, { bucket });
      await newer.register(from(5n));
      await newer.put("moving", "owned by from", { fence: from(5n) });
      const before = await contents(client, bucket, "fenced/manifests/");

      const moverClient = server.client();
      const raising = holdFirst(moverClient, isFenceWrite); // the raise of `to`: from's fence was read just before
      const moving = new FencedS3(moverClient, { bucket }).transfer("moving", { from: from(5n), to });
      await raising.reached;
      await newer.register(from(6n)); // returns before the transfer's manifest PUT is sent
      raising.release();

      await expect(moving).rejects.toMatchObject({ name: "StaleTokenError", resource: "order-from", token: 5n, highest: 6n });
      expect(await contents(client, bucket, "fenced/manifests/")).toEqual(before);
      expect(await newer.getBytes("moving")).toMatchObject({ resource: "order-from", token: 5n });
    });

    for (const [status, code] of [
      [429, "SlowDown"],
      [400, "RequestTimeout"],
    ] as const) {
      it(`a manifest PUT answered ${status} ${code} is sent again only after a new fence read, which refuses it once a higher token registered`, async () => {
        const bucket = await server.createBucket();
        const fence = (token: bigint): Fence => ({ resource: `order-${code}`, token });
        const newer = new FencedS3(client, { bucket });
        await newer.register(fence(33n));
        await newer.put("throttled", "from 33", { fence: fence(33n) });
        const before = await contents(client, bucket, "fenced/manifests/");

        const writerClient = server.client();
        const writer = new FencedS3(writerClient, { bucket });
        await writer.put("throttled", "again from 33", { fence: fence(33n) }); // warm: steady state
        const settled = await contents(client, bucket, "fenced/manifests/");
        expect(settled).not.toEqual(before);
        let armed = true;
        answerOnWire(writerClient, async (call) => {
          if (!(armed && call.method === "PUT" && call.path.includes("/manifests/"))) return undefined;
          armed = false;
          await newer.register(fence(34n)); // while the answer is on its way, and before any retry
          return { status, code };
        });
        const wire: string[] = []; // every request handed to the HTTP handler, the one answered by the test included
        onWire(writerClient, (r) => wire.push(`${r.method} ${r.kind}`));

        await expect(writer.put("throttled", "late from 33", { fence: fence(33n) })).rejects.toMatchObject({
          name: "StaleTokenError",
          token: 33n,
          highest: 34n,
        });
        // Every manifest PUT on the wire follows a fence read sent after the previous answer.
        const puts = wire.flatMap((w, i) => (w === "PUT manifests" ? [i] : []));
        for (const i of puts) expect(wire[i - 1]).toBe("GET fences");
        expect(puts).toHaveLength(1);
        expect(await contents(client, bucket, "fenced/manifests/")).toEqual(settled);
      });
    }
  });
}
