import { DeleteObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fence } from "../fence.js";
import { FencedS3 } from "./store.js";
import { answerOnWire, contents, intercept, onWire, skewDates, type FakeAnswer } from "./wire-test-support.js";
import type { StartBackend } from "./backend-test-support.js";

/**
 * No SDK ever resends a conditional PUT (PROTOCOL.md, "S3", "Conflicts and ambiguous outcomes", "What
 * the store takes from the SDK"), whatever the server's clock says. The SDK's SigV4 signer marks an
 * error answer `clockSkewCorrected` when the answer's `Date` is 4 minutes or more off the client's
 * clock and the offset it derives moved (an HTTP date has whole seconds: it moves on nearly every
 * answer), and the SDK's retry strategy then sends the same request again after its backoff —
 * without the fence read each try of a manifest PUT must follow. Each case runs at skews of 0, 5 and
 * 14.5 minutes, both ways: every answer the writer gets, the server's and the made-up one, says so.
 * Only the `Date` moves, not the server's clock, and the client signs on the offset it learns from
 * it: a skew must stay inside the 15 minutes S3 (and radosgw) accepts a signature's date within.
 */

const MINUTE = 60_000;
const SKEWS = [0, 5 * MINUTE, -5 * MINUTE, 14.5 * MINUTE, -14.5 * MINUTE];

/**
 * Answers after which a conditional PUT did not land, and the store reads before any next try; the
 * server's own 412 and 404 come below (a made-up one, with the object still at the ETag sent, would
 * say the backend refused its own ETag).
 */
const ANSWERS: readonly FakeAnswer[] = [
  { status: 409, code: "ConditionalRequestConflict" },
  { status: 429, code: "SlowDown" },
  { status: 400, code: "RequestTimeout" },
  { status: 403, code: "RequestTimeTooSkewed" },
];

const minutes = (ms: number): string => `${ms > 0 ? "+" : ""}${ms / MINUTE} min`;

/** Counts, per kind of conditional PUT, the commands the store sent and the requests that went on the wire. */
function countPuts(client: S3Client): { commands: Record<string, number>; wire: Record<string, number> } {
  const commands: Record<string, number> = { manifests: 0, fences: 0 };
  const wire: Record<string, number> = { manifests: 0, fences: 0 };
  intercept(client, (info, send) => {
    const kind = /\/(manifests|fences)\//.exec(info.key ?? "")?.[1];
    if (info.command === "PutObjectCommand" && kind !== undefined) commands[kind] = (commands[kind] ?? 0) + 1;
    return send();
  });
  onWire(client, (r) => {
    if (r.method === "PUT" && (r.kind === "manifests" || r.kind === "fences")) wire[r.kind] = (wire[r.kind] ?? 0) + 1;
  });
  return { commands, wire };
}

/** The suite, against the backend `start` gives (backend-test-support.ts). */
export function skewSuite(start: StartBackend): void {
  let server: Awaited<ReturnType<StartBackend>>;
  let client: S3Client;

  beforeAll(async () => {
    server = await start();
    client = server.client();
  });
  afterAll(async () => {
    await server?.stop();
  });

  describe("FencedS3: the SDK never resends a conditional PUT, whatever the server's clock says", () => {
    for (const skew of SKEWS) {
      for (const answer of ANSWERS) {
        it(`${minutes(skew)}: a manifest PUT answered ${answer.status} ${answer.code}, a higher token registered before the answer came: refused, the PUT sent once`, async () => {
          const bucket = await server.createBucket();
          const fence = (token: bigint): Fence => ({ resource: "skewed", token });
          const newer = new FencedS3(client, { bucket });
          const writerClient = server.client();
          skewDates(writerClient, skew);
          const writer = new FencedS3(writerClient, { bucket });
          await writer.put("k", "from 33", { fence: fence(33n) });
          await writer.put("k", "again from 33", { fence: fence(33n) }); // steady state: a remembered manifest, a fence read answered 304
          const settled = await contents(client, bucket, "fenced/manifests/");

          let armed = true;
          answerOnWire(writerClient, async (call) => {
            if (!(armed && call.method === "PUT" && call.path.includes("/manifests/"))) return undefined;
            armed = false;
            await newer.register(fence(34n)); // returns before the answer arrives, and so before any next request
            return answer;
          });
          const puts = countPuts(writerClient);

          await expect(writer.put("k", "late from 33", { fence: fence(33n) })).rejects.toMatchObject({
            name: "StaleTokenError",
            token: 33n,
            highest: 34n,
          });
          expect(puts.wire).toEqual(puts.commands);
          expect(puts.wire.manifests).toBe(1);
          expect(await contents(client, bucket, "fenced/manifests/")).toEqual(settled);
          expect(await newer.getBytes("k")).toMatchObject({ token: 33n, body: Buffer.from("again from 33") });
        });
      }

      it(`${minutes(skew)}: a manifest PUT answered 412 by the server itself (a remembered manifest gone stale) is sent once, then again after a fence read`, async () => {
        const bucket = await server.createBucket();
        const fence = (token: bigint, holder: string): Fence => ({ resource: "skewed-stale", token, holder });
        const writerClient = server.client();
        skewDates(writerClient, skew);
        const writer = new FencedS3(writerClient, { bucket });
        const other = new FencedS3(client, { bucket });
        await writer.put("k", "mine", { fence: fence(3n, "a") });
        await other.put("k", "the same lease's, from another process", { fence: fence(3n, "a") }); // the writer's remembered manifest is stale now
        const puts = countPuts(writerClient);

        await expect(writer.put("k", "mine again", { fence: fence(3n, "a") })).resolves.toMatchObject({ token: 3n });
        expect(puts.wire).toEqual(puts.commands);
        expect(puts.commands.manifests).toBe(2); // the swap on the stale manifest (the server's 412), then the retry's
        expect(await other.getBytes("k")).toMatchObject({ token: 3n, body: Buffer.from("mine again") });
      });

      it(`${minutes(skew)}: a manifest PUT answered by the server itself for a manifest gone (AWS: 404, radosgw: 412) is sent once, then a create after a read`, async () => {
        const bucket = await server.createBucket();
        const fence: Fence = { resource: "skewed-gone", token: 3n, holder: "a" };
        const writerClient = server.client();
        skewDates(writerClient, skew);
        const writer = new FencedS3(writerClient, { bucket });
        await writer.put("k", "mine", { fence });
        await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: "fenced/manifests/k" })); // behind the store's back
        const puts = countPuts(writerClient);

        await expect(writer.put("k", "mine again", { fence })).resolves.toMatchObject({ token: 3n });
        expect(puts.wire).toEqual(puts.commands);
        expect(puts.commands.manifests).toBe(2); // the swap on the manifest gone (the server's 404 or 412), then the create
      });

      it(`${minutes(skew)}: a raise of the fence object answered 409 is sent once, then again after a fence read`, async () => {
        const bucket = await server.createBucket();
        const fence = (token: bigint): Fence => ({ resource: "skewed-raise", token });
        const writerClient = server.client();
        skewDates(writerClient, skew);
        const writer = new FencedS3(writerClient, { bucket });
        await writer.register(fence(1n));
        let armed = true;
        answerOnWire(writerClient, (call) => {
          if (!(armed && call.method === "PUT" && call.path.includes("/fences/"))) return Promise.resolve(undefined);
          armed = false;
          return Promise.resolve({ status: 409, code: "ConditionalRequestConflict" });
        });
        const puts = countPuts(writerClient);

        await writer.register(fence(2n));
        expect(puts.wire).toEqual(puts.commands);
        expect(puts.commands.fences).toBe(2);
        expect(await new FencedS3(client, { bucket }).fence("skewed-raise")).toMatchObject({ token: 2n });
      });
    }
  });
}
