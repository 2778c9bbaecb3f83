import { existsSync, readFileSync, readdirSync } from "node:fs";
import { Readable } from "node:stream";
import { GetObjectCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { describe, expect, it } from "vitest";
import { startS3 } from "./s3.js";

/** Command lines of every process we can see; how "nothing left behind" is checked. */
function commandLines(): Map<number, string> {
  const table = new Map<number, string>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      table.set(Number(entry), readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " "));
    } catch {
      // exited while we looked
    }
  }
  return table;
}

function statusOf(err: unknown): number | undefined {
  return (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
}

describe("startS3", () => {
  it("starts a real S3 server: put/get, a stale If-Match is refused, stop() leaves nothing behind", async () => {
    const started = Date.now();
    const s3 = await startS3();
    const startMs = Date.now() - started;
    console.log(`startS3 (${s3.source}) took ${startMs} ms`);
    try {
      const client = s3.client();
      const bucket = await s3.createBucket();
      const first = await client.send(new PutObjectCommand({ Bucket: bucket, Key: "a/b", Body: "hello" }));
      const got = await client.send(new GetObjectCommand({ Bucket: bucket, Key: "a/b" }));
      expect(await got.Body?.transformToString()).toBe("hello");
      expect(got.ETag).toBe(first.ETag);

      // A stream body of known length goes through (the client must not ask for checksum trailers).
      const streamed = Buffer.alloc(300_000, 7);
      await client.send(
        new PutObjectCommand({ Bucket: bucket, Key: "stream", Body: Readable.from([streamed]), ContentLength: streamed.length }),
      );
      const back = await client.send(new GetObjectCommand({ Bucket: bucket, Key: "stream" }));
      expect(Buffer.from(await back.Body!.transformToByteArray()).equals(streamed)).toBe(true);

      // Compare-and-swap on the ETag, in whichever quoting this server accepts, then the same ETag is stale.
      const bare = (first.ETag ?? "").replaceAll('"', "");
      let swapped = false;
      for (const etag of [bare, `"${bare}"`]) {
        try {
          await client.send(new PutObjectCommand({ Bucket: bucket, Key: "a/b", Body: "second", IfMatch: etag }));
          swapped = true;
          break;
        } catch (err) {
          expect(statusOf(err)).toBe(412);
        }
      }
      expect(swapped).toBe(true);
      for (const etag of [bare, `"${bare}"`]) {
        const stale = await client.send(new PutObjectCommand({ Bucket: bucket, Key: "a/b", Body: "third", IfMatch: etag })).then(
          () => 200,
          (err: unknown) => statusOf(err),
        );
        expect(stale).toBe(412);
      }
      const create = await client.send(new PutObjectCommand({ Bucket: bucket, Key: "a/b", Body: "x", IfNoneMatch: "*" })).then(
        () => 200,
        (err: unknown) => statusOf(err),
      );
      expect(create).toBe(412);
      const after = await client.send(new GetObjectCommand({ Bucket: bucket, Key: "a/b" }));
      expect(await after.Body?.transformToString()).toBe("second");
    } catch (err) {
      await s3.stop();
      throw err;
    }

    if (s3.source !== "local") {
      await s3.stop();
      return;
    }
    expect(startMs).toBeLessThan(10_000);
    const port = new URL(s3.endpoint).port;
    const before = commandLines();
    const rgw = [...before].find(([, cmd]) => cmd.includes("radosgw") && cmd.includes(`:${port}`));
    expect(rgw).toBeDefined();
    // The cluster's directory is named in every daemon's command line (its ceph.conf).
    const dir = /-c (\S+)\/ceph\.conf/.exec(rgw?.[1] ?? "")?.[1] ?? "";
    expect(existsSync(dir)).toBe(true);
    const family = [...before].filter(([, cmd]) => cmd.includes(`${dir}/ceph.conf`)).map(([pid]) => pid);
    expect(family.length).toBe(3); // ceph-mon, ceph-osd, radosgw

    await s3.stop();
    await s3.stop(); // idempotent
    const after = commandLines();
    expect(family.filter((pid) => after.has(pid))).toEqual([]);
    expect(existsSync(dir)).toBe(false);
  });

  it("starts clusters side by side without them meeting", async () => {
    const servers = await Promise.all([startS3(), startS3()]);
    try {
      const [one, two] = servers;
      if (one === undefined || two === undefined) throw new Error("unreachable");
      // With S3_ENDPOINT both are the same server; with local clusters each has its own ports and state.
      if (one.source === "local") expect(one.endpoint).not.toBe(two.endpoint);
      const b1 = await one.createBucket(one.source === "local" ? "same-name" : undefined);
      const b2 = await two.createBucket(two.source === "local" ? "same-name" : undefined);
      await one.client().send(new PutObjectCommand({ Bucket: b1, Key: "k", Body: "one" }));
      await two.client().send(new PutObjectCommand({ Bucket: b2, Key: "k", Body: "two" }));
      const got = await one.client().send(new GetObjectCommand({ Bucket: b1, Key: "k" }));
      expect(await got.Body?.transformToString()).toBe("one");
    } finally {
      await Promise.all(servers.map((s) => s.stop()));
    }
  });
});

describe("startS3({ faults: true })", () => {
  it("starts a local cluster even with S3_ENDPOINT set; pause, resume, kill and restart act on radosgw, and its data survives", async () => {
    const saved = process.env.S3_ENDPOINT;
    process.env.S3_ENDPOINT = "http://127.0.0.1:9"; // would be used without faults: the faults must not be skipped
    let s3;
    try {
      s3 = await startS3({ faults: true });
    } finally {
      if (saved === undefined) delete process.env.S3_ENDPOINT;
      else process.env.S3_ENDPOINT = saved;
    }
    try {
      expect(s3.source).toBe("local");
      const { faults } = s3;
      const client = s3.client();
      const bucket = await s3.createBucket();
      await client.send(new PutObjectCommand({ Bucket: bucket, Key: "k", Body: "kept" }));
      const read = async (ms: number): Promise<string> => {
        const got = await client.send(new GetObjectCommand({ Bucket: bucket, Key: "k" }), { abortSignal: AbortSignal.timeout(ms) });
        return (await got.Body?.transformToString()) ?? "";
      };
      const failure = (ms: number): Promise<unknown> =>
        read(ms).then(
          () => undefined,
          (err: unknown) => err,
        );

      faults.pause();
      expect(faults.paused).toBe(true);
      expect(await failure(300)).toMatchObject({ name: "AbortError" }); // no answer: the request hangs until aborted
      faults.resume();
      expect(faults.paused).toBe(false);
      expect(await read(5_000)).toBe("kept");

      await faults.kill();
      expect(faults.running).toBe(false);
      expect(await failure(5_000)).toMatchObject({ code: "ECONNREFUSED" }); // nothing listens on the port
      const endpoint = s3.endpoint;
      await faults.restart();
      expect(faults.running).toBe(true);
      expect(s3.endpoint).toBe(endpoint);
      expect(await read(5_000)).toBe("kept"); // same port, same cluster, same objects and user

      // A paused radosgw is killed too, and a restart of a running one kills it first.
      faults.pause();
      await faults.restart();
      expect(faults.paused).toBe(false);
      expect(await read(5_000)).toBe("kept");
    } finally {
      await s3.stop();
    }
  });
});
