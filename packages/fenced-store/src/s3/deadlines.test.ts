import { Readable } from "node:stream";
import { PutObjectCommand } from "@aws-sdk/client-s3";
import { InvalidArgumentError } from "@fenced/fence";
import { startS3, type ServerFaults, type StartedS3 } from "@fenced/servers";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { CorruptStateError, OutcomeUnknownError, StoreSetupError, StoreUnavailableError } from "../errors.js";
import type { Fence } from "../fence.js";
import { fenceKey, manifestKey } from "../cas/layout.js";
import { FencedS3 } from "./store.js";
import { aroundWire, holdFirst, isFenceWrite, isManifestPut, networkError } from "./wire-test-support.js";

/** Deadlines and typed errors against a real radosgw that is paused, killed and restarted under the store. */

let server: StartedS3 & { readonly faults: ServerFaults };

beforeAll(async () => {
  server = await startS3({ faults: true });
});
afterEach(async () => {
  // Whatever a test did to radosgw, the next one finds it answering.
  if (server.faults.paused) server.faults.resume();
  if (!server.faults.running) await server.faults.restart();
});
afterAll(async () => {
  await server?.stop();
});

const TIMEOUT_MS = 1_000;
/** How late after timeoutMs a typed error may come: timers, and a loaded machine. */
const MARGIN_MS = 400;
const fence = (token: number, resource = "deadlines"): Fence => ({ resource, token: BigInt(token) });

/** Settles `work` and measures how long it took; a rejection is returned as the error. */
async function timed(work: () => Promise<unknown>): Promise<{ ms: number; error: unknown }> {
  const started = performance.now();
  const error = await work().then(
    () => undefined,
    (err: unknown) => err,
  );
  return { ms: Math.round(performance.now() - started), error };
}

async function store(options: { timeoutMs?: number; inlineLimit?: number } = {}): Promise<{ store: FencedS3; bucket: string }> {
  const bucket = await server.createBucket();
  return { store: new FencedS3(server.client(), { bucket, timeoutMs: TIMEOUT_MS, ...options }), bucket };
}

describe("FencedS3: timeoutMs", () => {
  it("is an integer number of milliseconds from 100 to 600,000 (default 5,000)", () => {
    const client = server.client();
    for (const timeoutMs of [99, 600_001, 1.5, Number.NaN, "5000", null]) {
      const made = (): FencedS3 => new FencedS3(client, { bucket: "some-bucket", timeoutMs } as never);
      expect(made).toThrow(InvalidArgumentError);
      expect(made).toThrow(/milliseconds/);
    }
    for (const timeoutMs of [100, 600_000, undefined])
      expect(() => new FencedS3(client, { bucket: "some-bucket", timeoutMs })).not.toThrow();
  });
});

describe("FencedS3: a paused radosgw", () => {
  it("get, getBytes, put (bytes, both kinds of stream), delete, update and register give a typed error within timeoutMs; then the same store works again", async () => {
    const { store: s } = await store();
    await s.put("k", JSON.stringify({ n: 1 }), { fence: fence(1) });
    server.faults.pause();
    const calls: Record<string, () => Promise<unknown>> = {
      get: () => s.get("k"),
      getBytes: () => s.getBytes("k"),
      "put (JSON)": () => s.put("k", JSON.stringify({ n: 2 }), { fence: fence(1) }),
      "put (stream, known length)": () => s.put("s1", Readable.from([Buffer.alloc(1000, 1)]), { fence: fence(1), contentLength: 1000 }),
      "put (stream, unknown length)": () => s.put("s2", Readable.from([Buffer.alloc(1000, 2)]), { fence: fence(1) }),
      delete: () => s.delete("k", { fence: fence(1) }),
      update: () => s.update("k", () => "x", { fence: fence(1) }),
      register: () => s.register(fence(2)),
    };
    const results = await Promise.all(Object.entries(calls).map(async ([name, call]) => [name, await timed(call)] as const));
    server.faults.resume();
    console.log(`paused radosgw, timeoutMs ${TIMEOUT_MS}: ${results.map(([name, r]) => `${name} ${r.ms} ms`).join(", ")}`);
    for (const [name, { ms, error }] of results) {
      // Nothing reached radosgw's answer: each is unavailable (timeout), or unknown if its manifest PUT was sent.
      if (error instanceof OutcomeUnknownError) expect(error.backend, name).toBe("s3");
      else expect(error, name).toMatchObject({ name: "StoreUnavailableError", backend: "s3", reason: "timeout" });
      expect((error as { operation?: unknown }).operation, name).toBe(name.replace(/ .*/, "").replace("getBytes", "get"));
      expect(ms, name).toBeGreaterThanOrEqual(TIMEOUT_MS - 20);
      expect(ms, name).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
    }
    await s.put("k", "after", { fence: fence(3) });
    expect((await s.getBytes("k"))?.body.toString()).toBe("after");
    await s.flush();
  });

  it("a manifest PUT sent to a paused radosgw: OutcomeUnknownError within timeoutMs, and the key read back later tells", async () => {
    const { store: s, bucket } = await store();
    const client = server.client();
    const held = holdFirst(client, isManifestPut);
    const writer = new FencedS3(client, { bucket, timeoutMs: TIMEOUT_MS });
    const writing = timed(() => writer.put("k", "maybe", { fence: fence(1) }));
    await held.reached;
    server.faults.pause(); // the PUT goes out now, to a server that does not answer
    held.release();
    const { ms, error } = await writing;
    server.faults.resume();
    console.log(`manifest PUT to a paused radosgw: OutcomeUnknownError after ${ms} ms`);
    expect(error).toBeInstanceOf(OutcomeUnknownError);
    expect(error).toMatchObject({ backend: "s3", key: "k", operation: "put" });
    expect(ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
    // Read back: radosgw had the request, so it may have applied it once resumed; either way the store is consistent.
    const now = await s.getBytes("k");
    if (now !== undefined) expect(now.body.toString()).toBe("maybe");
    await s.put("k", "settled", { fence: fence(1) });
    expect((await s.getBytes("k"))?.body.toString()).toBe("settled");
  });

  it("register(): a fence PUT sent to a paused radosgw is OutcomeUnknownError within timeoutMs", async () => {
    const { bucket } = await store();
    const client = server.client();
    const held = holdFirst(client, isFenceWrite);
    const registering = timed(() => new FencedS3(client, { bucket, timeoutMs: TIMEOUT_MS }).register(fence(5)));
    await held.reached;
    server.faults.pause();
    held.release();
    const { ms, error } = await registering;
    server.faults.resume();
    expect(error).toBeInstanceOf(OutcomeUnknownError);
    expect(error).toMatchObject({ backend: "s3", operation: "register" });
    expect(ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
  });

  it("a body whose bytes stop coming mid-stream: get()'s stream and getBytes() error with StoreUnavailableError instead of hanging", async () => {
    const { store: s } = await store();
    const big = Buffer.alloc(48 * 1024 * 1024, 7); // far more than the socket buffers hold
    // Written by a store of its own: the setup is not under the test's deadline (48 MiB took over
    // 1 s here on a loaded machine), only the reads below are.
    await new FencedS3(server.client(), { bucket: s.bucket, timeoutMs: 60_000 }).put("big", big, { fence: fence(1) });
    const client = server.client();
    const reader = new FencedS3(client, { bucket: s.bucket, timeoutMs: TIMEOUT_MS });

    // get(): the stream is handed over; radosgw stops once its first bytes are in.
    const found = await reader.get("big");
    const started = performance.now();
    let received = 0;
    const streamed = await (async () => {
      for await (const chunk of found?.body ?? []) {
        if (received === 0) server.faults.pause();
        received += (chunk as Buffer).length;
      }
    })().then(
      () => undefined,
      (err: unknown) => err,
    );
    const ms = Math.round(performance.now() - started);
    server.faults.resume();
    expect(streamed).toBeInstanceOf(StoreUnavailableError);
    expect(streamed).toMatchObject({ reason: "timeout", operation: "get" });
    expect(received).toBeGreaterThan(0);
    expect(received).toBeLessThan(big.length);
    expect(ms).toBeLessThan(TIMEOUT_MS * 1.25 + MARGIN_MS);

    // getBytes(): radosgw stops once the data GET's headers are in, its body still coming.
    aroundWire(client, async (call, send) => {
      const out = await send();
      if (call.method === "GET" && call.path.includes("/data/")) server.faults.pause();
      return out;
    });
    const bytes = await timed(() => reader.getBytes("big"));
    server.faults.resume();
    console.log(`body stalled mid-stream: get()'s stream failed after ${ms} ms (${received} bytes in); getBytes() after ${bytes.ms} ms`);
    expect(bytes.error).toMatchObject({ name: "StoreUnavailableError", reason: "timeout", operation: "get" });
    expect(bytes.ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
  });

  it("flush() with deletions queued for a paused radosgw returns: each deletion request is bounded by timeoutMs", async () => {
    const { store: s } = await store({ inlineLimit: 0 });
    await s.put("k", "one", { fence: fence(1) });
    await s.put("k", "two", { fence: fence(1) }); // queues the deletion of "one"'s data object
    server.faults.pause();
    const { ms, error } = await timed(() => s.flush());
    server.faults.resume();
    console.log(`flush() with radosgw paused: ${ms} ms`);
    expect(error).toBeUndefined();
    expect(ms).toBeLessThan(2 * TIMEOUT_MS + MARGIN_MS); // at most a DeleteObjects, then the single deletions it falls back to
  });

  it("a stream body that stalls on the caller's side is not the backend's: its wait is not counted", async () => {
    const { store: s } = await store();
    const slow = (): Readable => {
      const body = new Readable({ read() {} });
      body.push(Buffer.alloc(500, 1));
      setTimeout(() => {
        body.push(Buffer.alloc(500, 2));
        body.push(null);
      }, TIMEOUT_MS * 1.5);
      return body;
    };
    const [known, unknown] = await Promise.all([
      timed(() => s.put("known", slow(), { fence: fence(1), contentLength: 1000 })),
      timed(() => s.put("unknown", slow(), { fence: fence(1) })),
    ]);
    expect(known.error).toBeUndefined();
    expect(unknown.error).toBeUndefined();
    expect(known.ms).toBeGreaterThan(TIMEOUT_MS * 1.5 - 20);
    expect((await s.getBytes("known"))?.body.length).toBe(1000);
    expect((await s.getBytes("unknown"))?.body.length).toBe(1000);
  });
});

describe("FencedS3: a killed and restarted radosgw", () => {
  it("killed: get and put are StoreUnavailableError (refused); restarted: the same store works, with the data it had", async () => {
    const { store: s } = await store();
    await s.put("k", "before", { fence: fence(1) });
    await server.faults.kill();
    const got = await timed(() => s.getBytes("k"));
    const put = await timed(() => s.put("k", "during", { fence: fence(1) }));
    const deleted = await timed(() => s.delete("k", { fence: fence(1) }));
    console.log(`killed radosgw: getBytes ${got.ms} ms, put ${put.ms} ms, delete ${deleted.ms} ms`);
    for (const { ms, error } of [got, put, deleted]) {
      expect(error).toMatchObject({ name: "StoreUnavailableError", backend: "s3", reason: "refused" });
      expect(ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
    }
    await server.faults.restart();
    expect((await s.getBytes("k"))?.body.toString()).toBe("before");
    await s.put("k", "after", { fence: fence(1) });
    expect((await s.getBytes("k"))?.body.toString()).toBe("after");
  });

  it("radosgw dies with a manifest PUT on the wire: OutcomeUnknownError at once, not at the deadline", async () => {
    const { store: s, bucket } = await store({ timeoutMs: 5_000 });
    await s.put("k", "before", { fence: fence(1) });
    const client = server.client();
    aroundWire(client, (call, send) => {
      if (call.method !== "PUT" || !call.path.includes("/manifests/")) return send();
      server.faults.pause(); // the PUT goes to a server that holds it unanswered ...
      const sent = send();
      setTimeout(() => void server.faults.kill(), 100); // ... and dies: the connection is cut
      return sent;
    });
    const writer = new FencedS3(client, { bucket, timeoutMs: 5_000 });
    const { ms, error } = await timed(() => writer.put("k", "cut", { fence: fence(1) }));
    console.log(`radosgw killed with a manifest PUT in flight: OutcomeUnknownError after ${ms} ms`);
    expect(error).toBeInstanceOf(OutcomeUnknownError);
    expect(error).toMatchObject({ key: "k", operation: "put" });
    expect(ms).toBeLessThan(2_000);
    await server.faults.restart();
    expect(["before", "cut"]).toContain((await s.getBytes("k"))?.body.toString());
  });
});

describe("FencedS3: lost answers, setup and corrupt state", () => {
  it("the manifest PUT's answer is lost and the key cannot be read back: OutcomeUnknownError; the write had landed", async () => {
    const { store: s, bucket } = await store();
    const client = server.client();
    let dead = false;
    aroundWire(client, async (call, send) => {
      if (dead) throw networkError("ECONNREFUSED");
      if (call.method !== "PUT" || !call.path.includes("/manifests/")) return send();
      await send(); // the write lands ...
      dead = true; // ... and the connection, and every later one, fails
      throw networkError("ECONNRESET");
    });
    const writer = new FencedS3(client, { bucket, timeoutMs: TIMEOUT_MS });
    const { error } = await timed(() => writer.put("k", "landed", { fence: fence(1) }));
    expect(error).toBeInstanceOf(OutcomeUnknownError);
    expect(error).toMatchObject({ backend: "s3", key: "k", operation: "put", code: "OUTCOME_UNKNOWN", applied: "unknown" });
    expect((await s.getBytes("k"))?.body.toString()).toBe("landed");
  });

  it("a manifest PUT for which no connection opened was never sent: StoreUnavailableError (refused), not unknown", async () => {
    const { store: s, bucket } = await store();
    const client = server.client();
    let dead = false;
    aroundWire(client, (call, send) => {
      if (call.method === "PUT" && call.path.includes("/manifests/")) dead = true;
      return dead ? Promise.reject(networkError("ECONNREFUSED")) : send();
    });
    const { error } = await timed(() => new FencedS3(client, { bucket, timeoutMs: TIMEOUT_MS }).put("k", "never", { fence: fence(1) }));
    expect(error).toMatchObject({ name: "StoreUnavailableError", reason: "refused", operation: "put" });
    expect(await s.getBytes("k")).toBeUndefined();
  });

  it("update()'s function's own error is passed on as it is, even one that looks like the backend's", async () => {
    const { store: s } = await store();
    const own = networkError("ECONNREFUSED");
    await expect(s.update("k", () => Promise.reject(own), { fence: fence(1) })).rejects.toBe(own);
  });

  it("a bucket that does not exist: StoreSetupError (no-such-bucket) from reads and writes", async () => {
    const s = new FencedS3(server.client(), { bucket: "no-such-bucket-here", timeoutMs: TIMEOUT_MS });
    for (const call of [() => s.get("k"), () => s.put("k", "x", { fence: fence(1) }), () => s.register(fence(1))]) {
      const { error } = await timed(call);
      expect(error).toBeInstanceOf(StoreSetupError);
      expect(error).toMatchObject({ backend: "s3", problem: "no-such-bucket" });
    }
  });

  it("a manifest or fence object that is not what the store writes: CorruptStateError, and nothing is written", async () => {
    const { store: s, bucket } = await store();
    const client = server.client();
    const garbage = async (key: string): Promise<void> => {
      await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: "{not a manifest" }));
    };
    await garbage(manifestKey("fenced/", "k"));
    for (const call of [() => s.get("k"), () => s.getBytes("k"), () => s.put("k", "x", { fence: fence(1) })]) {
      const { error } = await timed(call);
      expect(error).toBeInstanceOf(CorruptStateError);
      expect(error).toMatchObject({ backend: "s3", what: "manifest", subject: "k" });
    }
    await garbage(fenceKey("fenced/", "broken"));
    const { error } = await timed(() => s.put("other", "x", { fence: fence(1, "broken") }));
    expect(error).toMatchObject({ name: "CorruptStateError", what: "fence", subject: "broken" });
    expect(await s.getBytes("other")).toBeUndefined();
  });
});
