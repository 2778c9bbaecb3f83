import type { Readable } from "node:stream";
import { GetObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fence } from "../fence.js";
import { FencedS3 } from "./store.js";
import { aroundWire, contents, listKeys, onWire, type WireRequest } from "./wire-test-support.js";

// PROTOCOL.md, "S3", "Conflicts and ambiguous outcomes": the caller's abort ends every call with its
// reason, and a write stopped before its manifest PUT leaves the manifest as it was and no data
// object of its own (a fence object raised before the abort may stay: a raise writes no data).
// Each case waits where a busy application's calls wait: for a connection of the client's pool
// (one socket, held by the test), or for the fence read the manifest PUT is sent after.

const TIMEOUT_MS = 10_000; // far beyond the abort: a call that ends at its deadline is not ending at the abort

let server: StartedS3;
let admin: S3Client;

beforeAll(async () => {
  server = await startS3();
  admin = server.client();
});
afterAll(async () => {
  await server?.stop();
});

const fresh = (resource: string): Fence => ({ resource, token: 5n, holder: "h2" });
const first = (resource: string): Fence => ({ resource, token: 1n, holder: "h" });

interface Case {
  readonly client: S3Client;
  readonly bucket: string;
  readonly store: FencedS3;
  /** The version of "k". */
  readonly version: string;
}

/** A bucket with a record under "k" (inline) and "big" (a data object), a key of "from", and a 1 MiB object to hold the socket with. */
async function setUp(maxSockets?: number): Promise<Case> {
  const client = server.client(maxSockets === undefined ? {} : { maxSockets });
  const bucket = await server.createBucket();
  const store = new FencedS3(client, { bucket, timeoutMs: TIMEOUT_MS, inlineLimit: 1_024 });
  const { version } = await store.put("k", "v1", { fence: first("r") });
  await store.put("big", Buffer.alloc(4_096, 1), { fence: first("r") });
  await store.put("moving", "v1", { fence: first("from") });
  await admin.send(new PutObjectCommand({ Bucket: bucket, Key: "hold", Body: Buffer.alloc(1024 * 1024, 7) }));
  return { client, bucket, store, version };
}

const operations: [string, (c: Case, signal: AbortSignal) => Promise<unknown>][] = [
  ["put (inline)", ({ store }, signal) => store.put("k", "v2", { fence: fresh("r"), signal })],
  ["put (a data object)", ({ store }, signal) => store.put("big", Buffer.alloc(8_192, 2), { fence: fresh("r"), signal })],
  ["put with ifVersion", ({ store, version }, signal) => store.put("k", "v2", { fence: fresh("r"), ifVersion: version, signal })],
  ["delete", ({ store }, signal) => store.delete("k", { fence: fresh("r"), signal })],
  ["delete with ifVersion", ({ store, version }, signal) => store.delete("k", { fence: fresh("r"), ifVersion: version, signal })],
  ["update", ({ store }, signal) => store.update("k", () => "v2", { fence: fresh("r"), signal })],
  ["transfer", ({ store }, signal) => store.transfer("moving", { from: fresh("from"), to: fresh("to"), signal })],
  ["register", ({ store }, signal) => store.register(fresh("r"), { signal })],
  ["fence", ({ store }, signal) => store.fence("r", { signal })],
  ["get", ({ store }, signal) => store.get("k", { signal })],
  ["getBytes", ({ store }, signal) => store.getBytes("big", { signal })],
];

describe("FencedS3: an abort while the client's only connection is taken", () => {
  for (const [name, call] of operations) {
    it(`${name}: ends at the abort with its reason, before the connection frees, and writes nothing`, async () => {
      const c = await setUp(1);
      const { client, bucket, store } = c;
      const before = await contents(admin, bucket, "fenced/");
      // The one socket: a GET whose body nobody reads.
      const held = (await client.send(new GetObjectCommand({ Bucket: bucket, Key: "hold" }))).Body as Readable;
      const controller = new AbortController();
      const reason = new Error("the caller left");
      let queued = 0;
      onWire(client, () => queued++);
      let freed = false;
      const settled = call(c, controller.signal).then(
        (value) => ({ value, freed }),
        (error: unknown) => ({ value: error, freed }),
      );
      // The call's first request has reached the HTTP handler, which waits for the one socket.
      await expect
        .poll(() => queued, { message: "a request of the call waits for the connection", timeout: 5_000, interval: 5 })
        .toBeGreaterThan(0);
      controller.abort(reason);
      setImmediate(() => {
        freed = true;
        held.destroy();
      });
      const { value, freed: freedFirst } = await settled;
      expect(value).toBe(reason);
      expect(freedFirst).toBe(false);
      await store.flush();
      expect(await contents(admin, bucket, "fenced/")).toEqual(before);
    });
  }
});

describe("FencedS3: an abort before the manifest PUT", () => {
  it("an abort that comes with the answer of the fence read the PUT waits for: the PUT never reaches the wire, and the attempt's data object is deleted", async () => {
    const { client, bucket, store } = await setUp();
    const before = await contents(admin, bucket, "fenced/");
    const controller = new AbortController();
    const reason = new Error("the lease was lost");
    const manifestPuts: WireRequest[] = [];
    onWire(client, (request) => {
      if (request.kind === "manifests" && request.method === "PUT") manifestPuts.push(request);
    });
    let uploaded = false;
    aroundWire(client, async (request, send) => {
      const answer = await send();
      if (request.method === "PUT" && request.path.includes("/data/")) uploaded = true;
      // The fence read sent after the upload: its answer is in, and the caller aborts right then.
      if (request.method === "GET" && request.path.includes("/fences/") && uploaded) controller.abort(reason);
      return answer;
    });
    await expect(store.put("big", Buffer.alloc(8_192, 3), { fence: first("r"), signal: controller.signal })).rejects.toBe(reason);
    await store.flush();
    expect(uploaded).toBe(true);
    expect(manifestPuts).toEqual([]);
    expect(await contents(admin, bucket, "fenced/")).toEqual(before);
    expect(await listKeys(admin, bucket, "fenced/data/")).toHaveLength(1); // "big"'s own body, as before
  });
});
