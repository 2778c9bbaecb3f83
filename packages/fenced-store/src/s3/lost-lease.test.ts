import { Readable } from "node:stream";
import type { S3Client } from "@aws-sdk/client-s3";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENDINGS, leaseHarness, refusedWithItsError, type LeaseHarness } from "../lease-test-support.js";
import { FencedS3 } from "./store.js";
import { intercept, listKeys } from "./wire-test-support.js";

/**
 * A fence that knows its lease ended is refused before any I/O, whether or not a signal was passed:
 * a real @fenced/lock Lease, released or run out, handed to every FencedS3 operation that takes a
 * fence (inline, data-object, streamed and multipart writes included), with no `signal` option.
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

interface Watched {
  readonly bucket: string;
  /** The store under test: every request its client sends is counted. */
  readonly store: FencedS3;
  /** The same bucket through a client nobody counts: for setting up and reading back. */
  readonly plain: FencedS3;
  readonly sent: () => number;
}

async function watchedStore(): Promise<Watched> {
  const bucket = await server.createBucket();
  const watchedClient = server.client();
  let sent = 0;
  intercept(watchedClient, (_info, send) => ((sent += 1), send()));
  // inlineLimit 1 KiB: a larger buffer goes to a data object of its own.
  const options = { bucket, inlineLimit: 1024 };
  return { bucket, store: new FencedS3(watchedClient, options), plain: new FencedS3(client, options), sent: () => sent };
}

for (const ending of ENDINGS) {
  describe(`FencedS3: a lease that was ${ending}, used as fence without a signal`, () => {
    it("put (inline, data object, stream of known and unknown length), delete and update are refused before any request; nothing is written", async () => {
      const lease = await leases.ended("s3-put", ending);
      const { bucket, store, plain, sent } = await watchedStore();
      let updated = false;
      await refusedWithItsError(store.put("k", "small", { fence: lease }), lease, ending);
      await refusedWithItsError(store.put("k", Buffer.alloc(4096, 1), { fence: lease }), lease, ending);
      await refusedWithItsError(
        store.put("k", Readable.from([Buffer.from("streamed")]), { fence: lease, contentLength: 8 }),
        lease,
        ending,
      );
      // Unknown length: the multipart path.
      await refusedWithItsError(store.put("k", Readable.from([Buffer.from("multipart")]), { fence: lease }), lease, ending);
      // A live signal passed beside it changes nothing: the fence itself says the lease ended.
      await refusedWithItsError(store.put("k", "small", { fence: lease, signal: new AbortController().signal }), lease, ending);
      // A plain fence with the lease's signal: the signal says the lease ended.
      await refusedWithItsError(
        store.put("k", "small", { fence: { resource: lease.resource, token: lease.token, holder: lease.holder }, signal: lease.signal }),
        lease,
        ending,
      );
      await refusedWithItsError(store.delete("k", { fence: lease }), lease, ending);
      await refusedWithItsError(
        store.update("k", () => ((updated = true), "new"), { fence: lease }),
        lease,
        ending,
      );
      expect(updated).toBe(false);
      expect(sent()).toBe(0);
      expect(await plain.getBytes("k")).toBeUndefined();
      expect(await listKeys(client, bucket)).toEqual([]);
      expect(lease.signal.reason).toBe(lease.lostReason);
    });

    it("register raises no fence object", async () => {
      const lease = await leases.ended("s3-register", ending);
      const { bucket, store, sent } = await watchedStore();
      await refusedWithItsError(store.register(lease), lease, ending);
      expect(sent()).toBe(0);
      expect(await listKeys(client, bucket)).toEqual([]);
    });

    it("transfer is refused whichever of its two fences is the ended lease; the key stays where it was", async () => {
      const lost = await leases.ended("s3-transfer", ending);
      const live = await leases.live("s3-transfer-live");
      try {
        const { bucket, store, plain, sent } = await watchedStore();
        // One key owned by the ended lease's resource (written below its token), one by the live lease's.
        await plain.put("of-lost", "a", { fence: { resource: lost.resource, token: 0n } });
        await plain.put("of-live", "b", { fence: live });
        const keys = await listKeys(client, bucket);
        const versions = async (): Promise<unknown[]> => [
          (await plain.getBytes("of-lost"))?.version,
          (await plain.getBytes("of-live"))?.version,
        ];
        const before = await versions();
        await refusedWithItsError(store.transfer("of-lost", { from: lost, to: live }), lost, ending);
        await refusedWithItsError(store.transfer("of-live", { from: live, to: lost }), lost, ending);
        expect(sent()).toBe(0);
        expect(await versions()).toEqual(before);
        expect(await listKeys(client, bucket)).toEqual(keys);
      } finally {
        await live.release();
      }
    });
  });
}
