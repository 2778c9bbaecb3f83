import { Readable } from "node:stream";
import type { S3Client } from "@aws-sdk/client-s3";
import { InvalidArgumentError } from "@fenced/fence";
import type { Lease } from "@fenced/lock";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StaleTokenError } from "../errors.js";
import type { Fence } from "../fence.js";
import { ENDINGS, leaseHarness, refusedWithItsError, type LeaseHarness } from "../lease-test-support.js";
import { FencedS3 } from "./store.js";
import { intercept, listKeys } from "./wire-test-support.js";

/**
 * Leases of several resources against FencedS3 on a real radosgw: a write takes one fence (one key
 * under one resource), so a lease of several is refused where one fence is expected, before any
 * request; register() takes the whole set and raises every resource's fence object.
 */

let server: StartedS3;
let client: S3Client;
let leases: LeaseHarness;
beforeAll(async () => {
  [server, leases] = await Promise.all([startS3(), leaseHarness()]);
  client = server.client();
});
afterAll(async () => {
  await Promise.all([server?.stop(), leases?.stop()]);
});

async function watchedStore(): Promise<{ bucket: string; store: FencedS3; plain: FencedS3; sent: () => number }> {
  const bucket = await server.createBucket();
  const watchedClient = server.client();
  let sent = 0;
  intercept(watchedClient, (_info, send) => ((sent += 1), send()));
  const options = { bucket, inlineLimit: 1024 };
  return { bucket, store: new FencedS3(watchedClient, options), plain: new FencedS3(client, options), sent: () => sent };
}

const f = (resource: string, token: bigint, holder = "h1"): Fence => ({ resource, token, holder });

describe("FencedS3: a lease of several resources", () => {
  it("put (inline, data object, stream), delete, update and transfer refuse it with InvalidArgumentError before any request: nothing is written", async () => {
    const { bucket, store, sent } = await watchedStore();
    const lease = await leases.liveSet(["s3-set-a", "s3-set-b"]);
    try {
      let updated = false;
      const calls = [
        () => store.put("k", "small", { fence: lease }),
        () => store.put("k", Buffer.alloc(4096, 1), { fence: lease }),
        () => store.put("k", Readable.from([Buffer.from("streamed")]), { fence: lease, contentLength: 8 }),
        () => store.put("k", "small", { fence: lease, ifVersion: "0123456789abcdef0123456789abcdef" }),
        () => store.delete("k", { fence: lease }),
        () => store.update("k", () => ((updated = true), "new"), { fence: lease }),
        () => store.transfer("k", { from: lease, to: f("elsewhere", 1n) }),
        () => store.transfer("k", { from: f("elsewhere", 1n), to: lease }),
      ];
      for (const call of calls) {
        const err = await call().then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(InvalidArgumentError);
        expect(String(err)).toContain("lease of 2 resources");
      }
      expect(updated).toBe(false);
      expect(sent()).toBe(0);
      expect(await listKeys(client, bucket)).toEqual([]);
      // One of its fences is one fence: that write goes through.
      await store.put("k", "small", { fence: lease.fences[1] as Fence });
      expect(await store.getBytes("k")).toMatchObject({
        resource: lease.fences[1]?.resource,
        token: lease.fences[1]?.token,
        holder: lease.holder,
      });
    } finally {
      await lease.release();
    }
  });

  it("register() raises every resource's fence object to the lease's tokens and holder", async () => {
    const { store } = await watchedStore();
    const lease = await leases.liveSet(["s3-reg-a", "s3-reg-b", "s3-reg-c"]);
    try {
      await store.register(lease);
      for (const fence of lease.fences) expect(await store.fence(fence.resource)).toEqual({ ...fence });
      // Registered again, or as a plain array: admitted (the same tokens from the same holder).
      await store.register([...lease.fences].reverse());
      // A token below one of them is refused on that resource's keys.
      const [first] = lease.fences;
      await expect(
        store.put("k", "1", { fence: { resource: first?.resource ?? "", token: (first?.token ?? 1n) - 1n } }),
      ).rejects.toBeInstanceOf(StaleTokenError);
    } finally {
      await lease.release();
    }
  });

  it("one stale fence of the set: StaleTokenError for it (the first in the order given); the others are raised as if registered alone", async () => {
    const { store, plain } = await watchedStore();
    await plain.register(f("b", 10n));
    await plain.register(f("c", 10n));
    const err = await store.register([f("a", 5n), f("b", 9n), f("c", 11n)]).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StaleTokenError);
    expect(err).toMatchObject({ resource: "b", token: 9n, highest: 10n, highestHolder: "h1" });
    expect(await plain.fence("b")).toEqual({ resource: "b", token: 10n, holder: "h1" });
    // Raised each by itself: harmless, they only refuse holders older than this lease's tokens.
    expect(await plain.fence("a")).toEqual({ resource: "a", token: 5n, holder: "h1" });
    expect(await plain.fence("c")).toEqual({ resource: "c", token: 11n, holder: "h1" });
    // Several stale: the first in the order given.
    await expect(store.register([f("c", 1n), f("b", 1n)])).rejects.toMatchObject({ resource: "c", token: 1n });
    await expect(store.register([f("b", 10n, "h2"), f("c", 1n)])).rejects.toMatchObject({ resource: "b", token: 10n });
  });

  it("a bad set is InvalidArgumentError before any request", async () => {
    const { bucket, store, sent } = await watchedStore();
    for (const set of [[], { fences: [] }, [f("a", 1n), f("a", 2n)], [f("a", 1n), { resource: "b" }], { fences: "a" }]) {
      await expect(store.register(set as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(sent()).toBe(0);
    expect(await listKeys(client, bucket)).toEqual([]);
  });
});

for (const ending of ENDINGS) {
  describe(`FencedS3: a lease of several resources that was ${ending}`, () => {
    it("register() raises no fence object: its LeaseLostError before any request", async () => {
      const lease = await leases.endedSet(["s3-set-lost-a", "s3-set-lost-b"], ending);
      const { bucket, store, sent } = await watchedStore();
      await refusedWithItsError(store.register(lease), lease, ending);
      expect(sent()).toBe(0);
      expect(await listKeys(client, bucket)).toEqual([]);
    });

    it("a write, a delete or a registration under one of its fences (lease.fences[i]): its LeaseLostError before any request", async () => {
      const lease = await leases.endedSet(["s3-set-fence-lost-a", "s3-set-fence-lost-b"], ending);
      const [first, second] = lease.fences as [Lease["fences"][number], Lease["fences"][number]];
      const { bucket, store, sent } = await watchedStore();
      await refusedWithItsError(store.put("k", "small", { fence: second }), lease, ending);
      await refusedWithItsError(store.delete("k", { fence: second }), lease, ending);
      await refusedWithItsError(store.register(first), lease, ending);
      expect(sent()).toBe(0);
      expect(await listKeys(client, bucket)).toEqual([]);
    });
  });
}
