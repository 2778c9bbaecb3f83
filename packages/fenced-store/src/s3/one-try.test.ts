import { describe, expect, it } from "vitest";
import type { Fence } from "../fence.js";
import { MemoryS3, radosgwProfile } from "./memory-s3-test-support.js";
import { FencedS3 } from "./store.js";
import { answerOnWire, onWire } from "./wire-test-support.js";

/**
 * The store gives a conditional PUT one try whatever the client's retry strategy decides
 * (conditional.ts, `fencedOneTry`): a caller's own strategy may retry every failure it is shown,
 * the store's withheld ones included, and the SDK then runs the PUT's middleware again. That second
 * run sends nothing; the call ends with the first try's failure, read by the store as it reads any
 * (PROTOCOL.md, "S3", "What the store takes from the SDK").
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
    expect(retried).toBeGreaterThan(0); // the strategy did retry the withheld failure
    expect(manifestPuts).toBe(1);
    expect(await newer.getBytes("k")).toMatchObject({ token: 33n, body: Buffer.from("from 33") });
  });
});
