import { GetObjectCommand } from "@aws-sdk/client-s3";
import { describe, expect, it } from "vitest";
import type { Fence } from "../fence.js";
import { MemoryS3, radosgwProfile } from "./memory-s3-test-support.js";
import { FencedS3 } from "./store.js";
import { answerOnWire, aroundWire, onWire } from "./wire-test-support.js";

/**
 * The store sends a conditional PUT once and at once, whatever the client's retry settings and
 * middleware (sent-once.ts; PROTOCOL.md, "S3", "What the store takes from the SDK"): the SDK's retry
 * middleware is replaced for the PUT (no retry loop, no adaptive mode's rate limiter), and a second
 * run of the PUT's middleware — by a retry of another name, or a caller's own middleware — sends
 * nothing: the call ends with the first try's answer, read by the store as it reads any.
 */
describe("FencedS3 over a client whose retry strategy retries every failure", () => {
  it("a manifest PUT answered 409 goes on the wire once; the store's own retry reads the fence first and is refused", async () => {
    const memory = new MemoryS3(radosgwProfile);
    const bucket = memory.createBucket();
    let retried = 0;
    // A RetryStrategyV2 that retries anything, at once, up to 5 tries.
    const retryStrategy = {
      acquireInitialRetryToken: () => Promise.resolve({ getRetryCount: () => 0, getRetryDelay: () => 0 }),
      refreshRetryTokenForRetry: (token: { getRetryCount: () => number }) => {
        const count = token.getRetryCount() + 1;
        if (count >= 5) return Promise.reject(new Error("no more tries"));
        retried++;
        return Promise.resolve({ getRetryCount: () => count, getRetryDelay: () => 0 });
      },
      recordSuccess: () => undefined,
    };
    const writerClient = memory.client("writer", { retryStrategy });
    const fence = (token: bigint): Fence => ({ resource: "retried", token });
    const writer = new FencedS3(writerClient, { bucket });
    const newer = new FencedS3(memory.client("newer"), { bucket });
    await writer.put("k", "from 33", { fence: fence(33n) });

    let armed = true;
    answerOnWire(writerClient, async (call) => {
      if (!(armed && call.method === "PUT" && call.path.includes("/manifests/"))) return undefined;
      armed = false;
      await newer.register(fence(34n));
      return { status: 409, code: "ConditionalRequestConflict" };
    });
    let manifestPuts = 0;
    onWire(writerClient, (r) => {
      if (r.method === "PUT" && r.kind === "manifests") manifestPuts++;
    });

    await expect(writer.put("k", "late from 33", { fence: fence(33n) })).rejects.toMatchObject({ name: "StaleTokenError", highest: 34n });
    expect(retried).toBeGreaterThan(0); // the strategy is in force: it retried the reads' 404s, though not the PUT
    expect(manifestPuts).toBe(1);
    expect(await newer.getBytes("k")).toMatchObject({ token: 33n, body: Buffer.from("from 33") });
  });
});

describe("FencedS3 over a client in the SDK's adaptive retry mode, throttled", () => {
  it("the manifest PUT goes on the wire in the turn its fence read is answered: no wait for the rate limiter's token", async () => {
    const memory = new MemoryS3(radosgwProfile);
    const bucket = memory.createBucket();
    // One try per send: the throttled reads below are not retried (and so not paused), yet each
    // throttled answer still lowers the adaptive rate.
    const writerClient = memory.client("writer", { retryMode: "adaptive", maxAttempts: 1 });
    const writer = new FencedS3(writerClient, { bucket });
    const fence: Fence = { resource: "adaptive", token: 33n };
    await writer.put("k", "from 33", { fence });
    // A throttled answer to a read of another key: the adaptive rate limiter now spaces this client's sends.
    let throttle = 1;
    answerOnWire(writerClient, (call) =>
      Promise.resolve(
        call.method === "GET" && call.path.endsWith("/other") && throttle-- > 0 ? { status: 503, code: "SlowDown" } : undefined,
      ),
    );
    await writerClient.send(new GetObjectCommand({ Bucket: bucket, Key: "other" })).catch(() => undefined);
    expect(throttle).toBe(0);

    let turnEnded = false;
    let putInTurn: boolean | undefined;
    aroundWire(writerClient, async (call, send) => {
      if (call.method === "PUT" && call.path.includes("/manifests/")) putInTurn ??= !turnEnded;
      const answer = await send();
      if (call.method === "GET" && call.path.includes("/fences/")) setImmediate(() => (turnEnded = true)); // the fence read's answer is in
      return answer;
    });
    await expect(writer.put("k", "again from 33", { fence })).resolves.toMatchObject({ token: 33n });
    expect(putInTurn).toBe(true);
  });
});

describe("FencedS3 over a client whose own middleware sends each request twice at once", () => {
  it("a conditional PUT goes on the wire once; the second try is refused before it is sent", async () => {
    const memory = new MemoryS3(radosgwProfile);
    const bucket = memory.createBucket();
    const writerClient = memory.client("writer");
    // A caller's hedging middleware for PUTs, outside the store's: two tries at once, the first answer wins.
    writerClient.middlewareStack.add(
      (next, context) => (args) => (context.commandName === "PutObjectCommand" ? Promise.any([next(args), next(args)]) : next(args)),
      { step: "build", name: "hedge" },
    );
    const writer = new FencedS3(writerClient, { bucket });
    let manifestPuts = 0;
    onWire(writerClient, (r) => {
      if (r.method === "PUT" && r.kind === "manifests") manifestPuts++;
    });
    const fence: Fence = { resource: "hedged", token: 1n };
    await expect(writer.put("k", "once", { fence })).resolves.toMatchObject({ token: 1n });
    await expect(writer.put("k", "twice", { fence })).resolves.toMatchObject({ token: 1n });
    expect(manifestPuts).toBe(2); // one per put
    expect(await writer.getBytes("k")).toMatchObject({ body: Buffer.from("twice") });
  });
});
