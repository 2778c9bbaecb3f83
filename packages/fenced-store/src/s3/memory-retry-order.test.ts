import { describe, expect, it } from "vitest";
import type { Fence } from "../fence.js";
import { MemoryS3, radosgwProfile } from "./memory-s3-test-support.js";
import { FencedS3 } from "./store.js";
import { answerOnWire, aroundWire } from "./wire-test-support.js";

/**
 * The pause before a retry (PROTOCOL.md, "S3", "Conflicts and ambiguous outcomes") comes before the
 * retry's reads, never between its fence read and its manifest PUT. Nothing in the write's state
 * marks a pause: a fence read stays current (run.ts, `fencesCurrent`) until the manifest is read
 * again or the data object changes, so a pause moved after the read would let the PUT go out on a
 * read made before it, and a register that returned during the pause would not refuse it. The
 * in-memory S3 answers within the turn a request is given, so "nothing between the read and the
 * PUT" is an order of requests here, not a time; over sockets (radosgw) it would be a race.
 */
describe("FencedS3 over the in-memory S3: the pause before a retry", () => {
  it("after a throttled manifest PUT, a register that starts once the retry's reads have answered is applied after the retry's PUT", async () => {
    const memory = new MemoryS3(radosgwProfile);
    const bucket = memory.createBucket();
    const fence = (token: bigint): Fence => ({ resource: "paused", token });
    const writerClient = memory.client("writer");
    const writer = new FencedS3(writerClient, { bucket });
    const newer = new FencedS3(memory.client("newer"), { bucket });
    await writer.put("k", "from 33", { fence: fence(33n) }); // steady state: the writer has seen the fence and the manifest

    let throttled = false;
    answerOnWire(writerClient, (call) => {
      if (throttled || !(call.method === "PUT" && call.path.includes("/manifests/"))) return Promise.resolve(undefined);
      throttled = true;
      return Promise.resolve({ status: 429, code: "SlowDown" });
    });
    let readsAfter = 0;
    let register!: () => void;
    const registering = new Promise<void>((resolve) => (register = resolve)).then(() => newer.register(fence(34n)));
    aroundWire(writerClient, async (call, send) => {
      const answer = await send();
      // The retry reads the fence object and the manifest in parallel; once both have answered, the
      // next turn starts a register of a higher token.
      if (throttled && call.method === "GET" && ++readsAfter === 2) setImmediate(register);
      return answer;
    });

    const late = await writer.put("k", "late from 33", { fence: fence(33n) });
    await registering;
    const applied = memory.log.map((a) => `${a.call.client} ${a.call.operation} ${a.call.key?.split("/")[1] ?? ""}`);
    const retry = applied.lastIndexOf("writer PutObject manifests");
    const raise = applied.indexOf("newer PutObject fences");
    expect(applied.filter((a) => a === "writer PutObject manifests")).toHaveLength(2); // the first put, the retry (the 429 was never applied)
    expect(raise).toBeGreaterThan(-1);
    expect(retry).toBeLessThan(raise); // with the pause after the read: the raise comes first, and the PUT still lands
    expect(await newer.getBytes("k")).toMatchObject({ version: late.version, token: 33n });
  });
});
