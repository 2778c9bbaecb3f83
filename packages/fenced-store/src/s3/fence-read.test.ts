import { createHash } from "node:crypto";
import { PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { InvalidArgumentError } from "@fenced/fence";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CorruptStateError, StaleTokenError } from "../errors.js";
import { FencedS3 } from "./store.js";
import { intercept } from "./wire-test-support.js";

let server: StartedS3;
let client: S3Client;

beforeAll(async () => {
  server = await startS3();
  client = server.client();
});
afterAll(async () => {
  await server?.stop();
});

describe("FencedS3.fence(): the resource's fence object, as every fenced write is checked against it", () => {
  it("undefined before anything; then the highest token registered or written, and its holder (or null)", async () => {
    const store = new FencedS3(client, { bucket: await server.createBucket() });
    expect(await store.fence("r")).toBeUndefined();
    await store.register({ resource: "r", token: 3n, holder: "lease-3" });
    expect(await store.fence("r")).toEqual({ resource: "r", token: 3n, holder: "lease-3" });
    await store.put("k", "body", { fence: { resource: "r", token: 5n, holder: "lease-5" } });
    expect(await store.fence("r")).toEqual({ resource: "r", token: 5n, holder: "lease-5" });
    await store.put("k", "body", { fence: { resource: "r", token: 6n } });
    expect(await store.fence("r")).toEqual({ resource: "r", token: 6n, holder: null });
    // A lower write is refused and raises nothing.
    await expect(store.put("k", "late", { fence: { resource: "r", token: 4n } })).rejects.toBeInstanceOf(StaleTokenError);
    expect(await store.fence("r")).toEqual({ resource: "r", token: 6n, holder: null });
    expect(await store.fence("other")).toBeUndefined();
  });

  it("a hand-built fence with token 2^62 is accepted, and then refuses every real lease; fence() shows it, with a holder or without", async () => {
    const store = new FencedS3(client, { bucket: await server.createBucket() });
    await store.register({ resource: "r", token: 7n, holder: "lease-7" });
    await store.register({ resource: "r", token: 2n ** 62n });
    expect(await store.fence("r")).toEqual({ resource: "r", token: 2n ** 62n, holder: null });
    await expect(store.register({ resource: "r", token: 8n, holder: "lease-8" })).rejects.toMatchObject({
      name: "StaleTokenError",
      highest: 2n ** 62n,
    });
    await store.register({ resource: "s", token: 2n ** 62n, holder: "forged" });
    expect(await store.fence("s")).toEqual({ resource: "s", token: 2n ** 62n, holder: "forged" });
  });

  it("with checkResourceFence: false a write leaves the fence object alone: fence() reports what register() set, the key's manifest holds more", async () => {
    const bucket = await server.createBucket();
    const unchecked = new FencedS3(client, { bucket, checkResourceFence: false });
    await unchecked.register({ resource: "r", token: 2n });
    await unchecked.put("k", "body", { fence: { resource: "r", token: 9n } });
    expect(await unchecked.fence("r")).toEqual({ resource: "r", token: 2n, holder: null });
    expect((await unchecked.getBytes("k"))?.token).toBe(9n);
  });

  it("an invalid resource: InvalidArgumentError before any request; a corrupt fence object: CorruptStateError", async () => {
    const bucket = await server.createBucket();
    const reading = server.client();
    let requests = 0;
    intercept(reading, (_info, send) => {
      requests++;
      return send();
    });
    const store = new FencedS3(reading, { bucket });
    for (const resource of ["", 42, "x".repeat(513), "a\u0000b"])
      await expect(store.fence(resource as string)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(store.fence("r", { signal: "stop" } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    const reason = new Error("stopped");
    await expect(store.fence("r", { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect(requests).toBe(0);

    const hash = createHash("sha256").update("broken", "utf8").digest("hex");
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: `fenced/fences/${hash}`, Body: '{"token":"1"}' }));
    const error: unknown = await store.fence("broken").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CorruptStateError);
    expect(error).toMatchObject({ what: "fence", subject: "broken" });
  });
});
