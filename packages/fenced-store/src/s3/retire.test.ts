import { ListObjectsV2Command, type S3Client } from "@aws-sdk/client-s3";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ResourceMismatchError, StaleTokenError } from "../errors.js";
import type { Fence } from "../fence.js";
import { FencedS3 } from "./store.js";

// The recipe of the README ("What storage costs": a resource a hand-built fence poisoned), step by
// step, on radosgw: the same steps as postgres/retire.test.ts, with the keys found as the manifests
// under <prefix>manifests/ (PROTOCOL.md, "S3", the layout).

let server: StartedS3;
let client: S3Client;

beforeAll(async () => {
  server = await startS3();
  client = server.client();
});
afterAll(async () => {
  await server?.stop();
});

/** Every key the store has a manifest for, tombstones included. */
async function keysOf(store: FencedS3): Promise<string[]> {
  const folder = `${store.prefix}manifests/`;
  const page = await client.send(new ListObjectsV2Command({ Bucket: store.bucket, Prefix: folder }));
  return (page.Contents ?? []).map((o) => (o.Key ?? "").slice(folder.length)).sort();
}

describe("FencedS3: retiring a resource a hand-built fence poisoned", () => {
  for (const intruder of [undefined, "intruder"]) {
    it(`moves its keys to a new resource under the stored fence replayed (poison ${intruder === undefined ? "without" : "with"} a holder)`, async () => {
      const store = new FencedS3(client, { bucket: await server.createBucket() });
      const before: Fence = { resource: "orders", token: 5n, holder: "lease-5" };
      await store.put("orders/41", "41", { fence: before });
      await store.put("orders/gone", "0", { fence: before });
      await store.delete("orders/gone", { fence: before });
      const poison: Fence =
        intruder === undefined ? { resource: "orders", token: 2n ** 62n } : { resource: "orders", token: 2n ** 62n, holder: intruder };
      await store.put("orders/42", "42", { fence: poison });

      // Every real lease of the resource is refused now, as transfer()'s `from` too.
      const real: Fence = { resource: "orders", token: 6n, holder: "lease-6" };
      const elsewhere: Fence = { resource: "orders.v2", token: 1n, holder: "lease-v2-1" };
      await expect(store.transfer("orders/41", { from: real, to: elsewhere })).rejects.toBeInstanceOf(StaleTokenError);
      const wrongHolder: Fence = { resource: "orders", token: 2n ** 62n, holder: "somebody-else" };
      await expect(store.transfer("orders/41", { from: wrongHolder, to: elsewhere })).rejects.toBeInstanceOf(StaleTokenError);

      // The recipe: read the stored fence, replay it as `from`, move every key to the new resource.
      const stuck = await store.fence("orders");
      if (stuck === undefined) throw new Error("the poisoned resource has a fence object");
      expect(stuck).toEqual({ resource: "orders", token: 2n ** 62n, holder: intruder ?? null });
      const from: Fence = { resource: stuck.resource, token: stuck.token, holder: stuck.holder ?? undefined };
      const keys = await keysOf(store);
      expect(keys).toEqual(["orders/41", "orders/42", "orders/gone"]);
      for (const key of keys) await store.transfer(key, { from, to: elsewhere });

      expect(await store.getBytes("orders/41")).toMatchObject({ resource: "orders.v2", token: 1n });
      expect((await store.getBytes("orders/42"))?.body.toString()).toBe("42");
      expect(await store.getBytes("orders/gone")).toBeUndefined();
      // The new resource's leases write on; a write naming the old resource is refused as another's key.
      await store.put("orders/42", "43", { fence: elsewhere });
      await store.put("orders/gone", "1", { fence: elsewhere });
      await expect(store.put("orders/41", "x", { fence: poison })).rejects.toBeInstanceOf(ResourceMismatchError);
      // The old name keeps its poisoned fence (replaying it raised nothing); the new one ratchets as any.
      expect(await store.fence("orders")).toEqual(stuck);
      const next: Fence = { resource: "orders.v2", token: 2n, holder: "lease-v2-2" };
      await store.put("orders/42", "44", { fence: next });
      await expect(store.put("orders/42", "late", { fence: elsewhere })).rejects.toBeInstanceOf(StaleTokenError);
    });
  }
});
