import type { Readable } from "node:stream";
import { GetObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fence } from "../fence.js";
import { FencedS3 } from "./store.js";
import { aroundWire, onWire } from "./wire-test-support.js";

// PROTOCOL.md, "S3", "The write", step 7: no byte of a manifest PUT waits, after the fence read it is
// checked against, for anything the write did not send itself — a connection of the client's pool
// included. With the pool full, a PUT handed to the SDK would queue behind whatever holds its sockets
// (another call's slow upload, a body nobody reads), for as long as that takes, and land after a
// register of a higher token had returned. The store sends conditional PUTs over connections of its
// own (conditional.ts, ownSockets).

const TIMEOUT_MS = 10_000; // far beyond a round trip: a PUT that waits for the held socket ends at this deadline

let server: StartedS3;
let admin: S3Client;

beforeAll(async () => {
  server = await startS3();
  admin = server.client();
});
afterAll(async () => {
  await server?.stop();
});

/**
 * A client with one socket, a bucket with a 1 MiB "hold" object, and a hold armed on the client: as
 * the next fence read's answer comes in (its socket frees once its empty body is read), a GET of
 * "hold" whose body nobody reads is handed to the pool first, so it takes that socket and keeps it.
 * `taken` resolves once it has it; `release()` destroys its body and frees the socket.
 */
async function onePooledSocket(): Promise<{
  client: S3Client;
  bucket: string;
  arm: () => void;
  /** Whether the hold's GET was sent. */
  sent: () => boolean;
  taken: Promise<void>;
  release: () => Promise<void>;
}> {
  const client = server.client({ maxSockets: 1 });
  const bucket = await server.createBucket();
  await admin.send(new PutObjectCommand({ Bucket: bucket, Key: "hold", Body: Buffer.alloc(1024 * 1024, 7) }));
  let armed = false;
  let held: Promise<Readable> | undefined;
  let tookSocket!: () => void;
  const taken = new Promise<void>((resolve) => (tookSocket = resolve));
  aroundWire(client, async (call, send) => {
    const answer = await send();
    if (armed && held === undefined && call.method === "GET" && call.path.includes("/fences/")) {
      held = client.send(new GetObjectCommand({ Bucket: bucket, Key: "hold" })).then((res) => res.Body as Readable);
      void held.then(tookSocket);
    }
    return answer;
  });
  return {
    client,
    bucket,
    arm: () => (armed = true),
    sent: () => held !== undefined,
    taken,
    release: async () => {
      (await held)?.destroy();
    },
  };
}

describe("FencedS3: a conditional PUT never waits for a connection of the client's pool", () => {
  it("the client's one socket is taken between the fence read's answer and the manifest PUT: the PUT is answered while it stays taken", async () => {
    const { client, bucket, arm, sent, release } = await onePooledSocket();
    const fence: Fence = { resource: "pooled", token: 33n };
    const writer = new FencedS3(client, { bucket, timeoutMs: TIMEOUT_MS });
    await writer.put("k", "from 33", { fence });
    await writer.put("k", "again from 33", { fence }); // steady state: fence read (304), then the manifest PUT
    arm();
    const puts: string[] = [];
    onWire(client, (r) => r.method === "PUT" && puts.push(r.kind));

    try {
      await expect(writer.put("k", "late from 33", { fence })).resolves.toMatchObject({ token: 33n });
      expect(puts).toEqual(["manifests"]);
      expect(sent()).toBe(true);
    } finally {
      await release();
    }
    expect(await new FencedS3(admin, { bucket }).getBytes("k")).toMatchObject({ body: Buffer.from("late from 33") });
  });

  it("with the pool full, a register of a higher token meanwhile: the write ends without the held socket, landed or refused", async () => {
    const { client, bucket, arm, taken, release } = await onePooledSocket();
    const fence = (token: bigint): Fence => ({ resource: "pooled-newer", token });
    const writer = new FencedS3(client, { bucket, timeoutMs: TIMEOUT_MS });
    const newer = new FencedS3(admin, { bucket });
    await writer.put("k", "from 33", { fence: fence(33n) });
    arm();

    const writing = writer.put("k", "late from 33", { fence: fence(33n) }).then(
      (value) => ({ landed: true as const, value }),
      (error: unknown) => ({ landed: false as const, error }),
    );
    try {
      await taken; // the hold has the socket: anything the write sends over the pool waits until it is released
      await newer.register(fence(34n));
      const outcome = await writing; // the hold still has the socket
      const stored = await newer.getBytes("k");
      // The PUT went out on the fence read it followed: landed (before the register, or within the one
      // round trip PROTOCOL.md's window allows), or refused. It did not wait across the register.
      if (outcome.landed) expect(stored).toMatchObject({ token: 33n, body: Buffer.from("late from 33") });
      else expect(outcome.error).toMatchObject({ name: "StaleTokenError" });
      await expect(newer.put("k", "from 34", { fence: fence(34n) })).resolves.toMatchObject({ token: 34n });
    } finally {
      await release();
    }
  });
});
