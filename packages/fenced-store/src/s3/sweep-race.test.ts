import { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { startS3, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fence } from "../fence.js";
import { FencedS3, type S3SweepReport } from "./store.js";
import { collectGarbage } from "./test-support.js";
import { holdFirst, intercept } from "./wire-test-support.js";

// On radosgw (16.2), an AbortMultipartUpload processed while the writer's CompleteMultipartUpload is
// lets Complete answer 200 and queues the parts for garbage collection: the object reads back until
// GC runs, then is gone. collectGarbage() runs GC at once, so these tests need the local radosgw.
let server: StartedS3;

beforeAll(async () => {
  server = await startS3({ faults: true });
});
afterAll(async () => {
  await server?.stop();
});

const MiB = 1024 * 1024;
const fence: Fence = { resource: "race", token: 1n };

/** A body of unknown length: multipart, two parts (5 MiB and a tail). */
function stream(i: number): Readable {
  return Readable.from([Buffer.alloc(5 * MiB, i), Buffer.from(`tail ${i}`)], { objectMode: false });
}

function within<T>(p: Promise<T>, what: string): Promise<T> {
  return Promise.race([p, sleep(20_000).then(() => Promise.reject(new Error(`${what} never came`)))]);
}

interface Round {
  readonly key: string;
  /** The stream write's answer: its version, or undefined if it failed. */
  readonly written: string | undefined;
  readonly report: S3SweepReport;
  /** Another writer's version of the key, written while the stream's Complete was held. */
  readonly other: string | undefined;
}

/**
 * One stream write held right before its CompleteMultipartUpload while a sweep (minAgeMs: 0) runs;
 * `meanwhile` runs before the sweep. If the sweep sends an abort, the Complete goes first and the
 * abort `i % 4` ms after: the race radosgw loses bodies in.
 */
async function round(
  bucket: string,
  i: number,
  key: string,
  meanwhile: () => Promise<string | undefined>,
): Promise<Round & { aborts: number }> {
  const writerClient = server.client();
  const sweeperClient = server.client();
  const completing = holdFirst(writerClient, (info) => info.command === "CompleteMultipartUploadCommand");
  const aborting = holdFirst(sweeperClient, (info) => info.command === "AbortMultipartUploadCommand");
  let aborts = 0;
  intercept(sweeperClient, (info, send) => {
    if (info.command === "AbortMultipartUploadCommand") aborts++;
    return send();
  });
  const writer = new FencedS3(writerClient, { bucket, timeoutMs: 60_000, partSize: 5 * MiB });
  const put = writer.put(key, stream(i), { fence });
  await within(completing.reached, "the Complete");
  const other = await meanwhile();
  const sweep = new FencedS3(sweeperClient, { bucket, timeoutMs: 60_000 }).sweep({ minAgeMs: 0 });
  await within(Promise.race([aborting.reached, sweep]), "the sweep");
  completing.release();
  await sleep(i % 4);
  aborting.release();
  const [written, report] = await Promise.all([
    put.then(
      (w) => w.version,
      () => undefined,
    ),
    sweep,
  ]);
  return { key, written, report, other, aborts };
}

/** Every key reads back at the version its last acknowledged write left, with that write's body. */
async function readBack(bucket: string, rounds: readonly Round[]): Promise<Record<string, string>> {
  const reader = new FencedS3(server.client(), { bucket, maxAttempts: 2 });
  const out: Record<string, string> = {};
  for (const r of rounds) {
    out[r.key] = await reader.getBytes(r.key).then(
      (found) => {
        if (found === undefined) return "absent";
        if (found.version === r.written) return `the stream's ${found.body.length} bytes`;
        if (found.version === r.other) return `the other's ${found.body.toString()}`;
        return "another version";
      },
      (err: unknown) => (err as Error).name,
    );
  }
  return out;
}

describe("FencedS3.sweep racing a writer's CompleteMultipartUpload (radosgw)", () => {
  it(
    "a writer's upload whose target is current (or a create's on a key with no manifest) is never aborted: every acknowledged body survives radosgw's garbage collection",
    { timeout: 120_000 },
    async () => {
      const bucket = await server.createBucket();
      const setup = new FencedS3(server.client(), { bucket });
      const rounds: (Round & { aborts: number })[] = [];
      for (let i = 0; i < 6; i++) {
        const key = `big/${i}`;
        // Odd rounds: the key has a manifest, the stream's target, current throughout. Even: a create.
        if (i % 2 === 1) await setup.put(key, "v0", { fence });
        rounds.push(await round(bucket, i, key, () => Promise.resolve(undefined)));
      }
      expect(rounds.map((r) => r.aborts)).toEqual([0, 0, 0, 0, 0, 0]);
      expect(rounds.map((r) => r.report.uploads)).toEqual(
        rounds.map(() => ({ scanned: 1, aborted: 0, kept: { named: 1, young: 0, unrecognised: 0 } })),
      );
      expect(rounds.every((r) => r.written !== undefined)).toBe(true);
      await collectGarbage(server);
      const read = await readBack(bucket, rounds);
      expect(read).toEqual(Object.fromEntries(rounds.map((r, i) => [r.key, `the stream's ${5 * MiB + `tail ${i}`.length} bytes`])));
    },
  );

  it(
    "a writer's upload whose target was replaced is aborted; whichever way the abort races its Complete, nothing acknowledged is lost after garbage collection",
    { timeout: 120_000 },
    async () => {
      const bucket = await server.createBucket();
      const other = new FencedS3(server.client(), { bucket });
      const rounds: (Round & { aborts: number })[] = [];
      for (let i = 0; i < 6; i++) {
        const key = `big/${i}`;
        if (i % 2 === 1) await other.put(key, "v0", { fence });
        // Another writer replaces the stream's target (or, for a create, writes the key) while its Complete is held.
        const replace = async (): Promise<string> => (await other.put(key, `other ${i}`, { fence })).version;
        rounds.push(await round(bucket, i, key, replace));
      }
      expect(rounds.map((r) => r.aborts)).toEqual([1, 1, 1, 1, 1, 1]);
      await collectGarbage(server);
      const read = await readBack(bucket, rounds);
      // The stream's write, if acknowledged, landed after the other's (its first attempt could not): its
      // body, copied from the raced object under a name of its own, reads back whole.
      const expected = rounds.map((r, i) => [
        r.key,
        r.written === undefined ? `the other's other ${i}` : `the stream's ${5 * MiB + `tail ${i}`.length} bytes`,
      ]);
      console.log(
        JSON.stringify({
          raced: rounds.map((r) => ({ key: r.key, acknowledged: r.written !== undefined, aborted: r.report.uploads.aborted })),
        }),
      );
      expect(read).toEqual(Object.fromEntries(expected));
    },
  );
});
