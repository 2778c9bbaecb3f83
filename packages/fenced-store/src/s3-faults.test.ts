import type { S3Client } from "@aws-sdk/client-s3";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError } from "./errors.js";
import type { Fence } from "./fence.js";
import { FencedS3 } from "./s3.js";
import { auditManifests, fakeError, intercept, isManifestPut, listKeys, type RequestInfo } from "./s3-test-support.js";

let server: StartedS3;

beforeAll(async () => {
  server = await startS3();
});
afterAll(async () => {
  await server?.stop();
});

const fence = (token: number, resource = "faults"): Fence => ({ resource, token: BigInt(token) });

/** A client whose first manifest PUT suffers `fault`; every other request goes through untouched. */
async function faulty(fault: (send: () => Promise<unknown>) => Promise<unknown>): Promise<{ client: S3Client; bucket: string; store: FencedS3 }> {
  const client = server.client();
  const bucket = await server.createBucket();
  let armed = true;
  intercept(client, (info, send) => {
    if (armed && isManifestPut(info)) {
      armed = false;
      return fault(send);
    }
    return send();
  });
  return { client, bucket, store: new FencedS3(client, { bucket, inlineLimit: 0 }) };
}

describe("FencedS3: failures and ambiguous outcomes", () => {
  const landedThenLost: [string, number | undefined, string][] = [
    ["a timeout after the write landed", undefined, "TimeoutError"],
    ["a 500 after the write landed", 500, "InternalError"],
    ["the SDK's own retry finding the earlier attempt (412)", 412, "PreconditionFailed"],
  ];
  for (const [what, status, name] of landedThenLost) {
    it(`${what}: resolved as success by reading back the writeId`, async () => {
      const { client, bucket, store } = await faulty(async (send) => {
        await send();
        throw fakeError(status, name);
      });
      const history = auditManifests(client);
      const result = await store.put("k", "body", { fence: fence(1) });
      const stored = await store.getBytes("k");
      expect(stored?.version).toBe(result.version);
      expect(stored?.body.toString()).toBe("body");
      // Exactly one write landed (no duplicate from a retry): the next one is seq 2, and one data object exists.
      await store.put("k", "next", { fence: fence(1) });
      expect((await new FencedS3(client, { bucket }).getBytes("k"))?.body.toString()).toBe("next");
      expect(history.at(-1)?.seq).toBe(2);
      await store.flush();
      expect(await listKeys(client, bucket, "fenced/data/")).toHaveLength(1);
    });
  }

  const neverSent: [string, number | undefined, string][] = [
    ["a connection reset before the request reached the server", undefined, "ECONNRESET"],
    ["409 ConditionalRequestConflict", 409, "ConditionalRequestConflict"],
    ["radosgw's 500 for the loser of a race", 500, "UnknownError"],
  ];
  for (const [what, status, name] of neverSent) {
    it(`${what}: re-read and retried`, async () => {
      const { client, bucket, store } = await faulty(() => Promise.reject(fakeError(status, name)));
      const result = await store.put("k", "body", { fence: fence(1) });
      expect((await store.getBytes("k"))?.version).toBe(result.version);
      await store.flush();
      expect(await listKeys(client, bucket, "fenced/data/")).toHaveLength(1);
    });
  }

  it("a write that lost its response while a higher token overtook it reports StaleTokenError", async () => {
    const other = server.client();
    const late: { store34?: FencedS3 } = {};
    const { client, bucket, store } = await faulty(async (send) => {
      await send(); // 33's write lands ...
      await late.store34?.put("k", "from 34", { fence: fence(34) }); // ... is overwritten by 34 at once ...
      throw fakeError(undefined, "TimeoutError"); // ... and 33 never heard back.
    });
    const store34 = new FencedS3(other, { bucket });
    late.store34 = store34;
    await expect(store.put("k", "from 33", { fence: fence(33) })).rejects.toBeInstanceOf(StaleTokenError);
    expect((await store.getBytes("k"))?.body.toString()).toBe("from 34");
    await Promise.all([store.flush(), store34.flush()]);
    expect(await listKeys(client, bucket, "fenced/data/")).toEqual([]); // 34's body is inline; 33's was removed
  });

  it("a backend that wants quoted ETags in If-Match: the store switches spelling once and goes on", async () => {
    const client = server.client();
    const bucket = await server.createBucket();
    // Emulates such a backend on top of the real one: bare ETags are refused, quoted ones are sent on bare.
    intercept(client, (info, send) => {
      const ifMatch = info.input.IfMatch;
      if (typeof ifMatch === "string" && !ifMatch.startsWith('"')) return Promise.reject(fakeError(412, "PreconditionFailed"));
      if (typeof ifMatch === "string") info.input.IfMatch = ifMatch.replaceAll('"', "");
      return send();
    });
    const store = new FencedS3(client, { bucket });
    await store.put("k", "one", { fence: fence(1) });
    await store.put("k", "two", { fence: fence(1) });
    await store.put("k", "three", { fence: fence(2) });
    expect((await store.getBytes("k"))?.body.toString()).toBe("three");
    expect(await store.verify()).toEqual({ etagForm: "quoted" });
  });

  it("round trips: steady state is one conditional PUT (plus one GET of the resource fence by default)", async () => {
    const client = server.client();
    const bucket = await server.createBucket();
    const seen: RequestInfo[] = [];
    intercept(client, (info, send) => {
      seen.push(info);
      return send();
    });
    const count = async (store: FencedS3, token: number, key = "k"): Promise<string[]> => {
      seen.length = 0;
      await store.put(key, "body", { fence: fence(token, "rt") });
      return seen.map((r) => `${r.command.replace("ObjectCommand", "")} ${r.key?.split("/")[1] ?? ""}`);
    };
    const fenced = new FencedS3(client, { bucket });
    // First write of a new key with a new token: the fence is read and raised; the key is created blind.
    expect(await count(fenced, 1)).toEqual(["Get fences", "Put fences", "Put manifests"]);
    expect(await count(fenced, 1)).toEqual(["Get fences", "Put manifests"]); // steady state
    const objectOnly = new FencedS3(client, { bucket, checkResourceFence: false });
    // A store that has not seen the key tries a create, learns the key exists, reads it, swaps.
    expect(await count(objectOnly, 2)).toEqual(["Put manifests", "Get manifests", "Put manifests"]);
    expect(await count(objectOnly, 2)).toEqual(["Put manifests"]); // steady state: one request
    expect(await count(objectOnly, 2, "fresh")).toEqual(["Put manifests"]); // a new key: one request
  });
});
