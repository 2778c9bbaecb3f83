import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "@fenced/fence";
import type { RedisClient } from "./client.js";
import { MIN_TTL_MS } from "./options.js";
import { Redlock } from "./redlock.js";

/** A node that grants every acquire and confirms every extension at once, and counts what it was sent. */
function grantingNode(): RedisClient & { readonly calls: number } {
  let calls = 0;
  let counter = 0;
  const answer = (): Promise<unknown> => {
    calls++;
    return Promise.resolve([1, ++counter]);
  };
  return {
    get calls() {
      return calls;
    },
    evalsha: answer,
    eval: answer,
    script: () => Promise.resolve("sha"),
    ping: () => Promise.resolve("PONG"),
  };
}

function refusedTtl(argument = "ttlMs"): InvalidArgumentError {
  return expect.objectContaining({
    name: "InvalidArgumentError",
    argument,
    message: expect.stringMatching(/milliseconds/) as string,
  }) as InvalidArgumentError;
}

describe("a TTL too short to be of use is refused before any command", () => {
  it(`acquire(), using() and both extends refuse a TTL below ${MIN_TTL_MS} ms, naming the unit`, async () => {
    const nodes = [grantingNode(), grantingNode(), grantingNode()];
    const redlock = new Redlock(nodes, { retryCount: 0 });
    const routine = (): Promise<string> => Promise.resolve("ran");
    for (const ttl of [1, 10, 50, MIN_TTL_MS - 1]) {
      await expect(redlock.acquire("short", ttl)).rejects.toThrow(refusedTtl());
      await expect(redlock.using("short", ttl, routine)).rejects.toThrow(refusedTtl());
    }
    expect(nodes.map((n) => n.calls)).toEqual([0, 0, 0]);
    await expect(redlock.acquire("short", 1)).rejects.toThrow(`ttlMs: must be at least ${MIN_TTL_MS} milliseconds`);

    const lease = await redlock.acquire("short", MIN_TTL_MS);
    expect(lease.remainingMs).toBeGreaterThan(0);
    const sent = nodes.map((n) => n.calls);
    await expect(lease.extend(10)).rejects.toThrow(refusedTtl());
    const held = { resource: lease.resource, token: lease.token, value: lease.value };
    await expect(redlock.extend(held, 10)).rejects.toThrow(refusedTtl());
    expect(nodes.map((n) => n.calls)).toEqual(sent);
    // A refused TTL is bad input, not a lost lease.
    expect(lease.lostReason).toBeUndefined();
  });

  it("a TTL that the drift allowance (driftFactor × TTL + 2 ms) leaves no validity is refused, however long", async () => {
    const nodes = [grantingNode(), grantingNode(), grantingNode()];
    // 0.99 × 200 + 2 = 200: not a millisecond of validity left.
    const drifty = new Redlock(nodes, { retryCount: 0, driftFactor: 0.99 });
    await expect(drifty.acquire("drift", 200)).rejects.toThrow(refusedTtl());
    await expect(drifty.acquire("drift", 200)).rejects.toThrow(/drift allowance/);
    await expect(drifty.using("drift", 200, () => Promise.resolve())).rejects.toThrow(refusedTtl());
    expect(nodes.map((n) => n.calls)).toEqual([0, 0, 0]);
    // 0.99 × 100,000 + 2 = 99,002: 998 ms left, which is some validity, and more than an acquire takes on a busy machine.
    const lease = await drifty.acquire("drift", 100_000);
    expect(lease.remainingMs).toBeGreaterThan(0);
    await expect(lease.extend(200)).rejects.toThrow(refusedTtl());
  });
});
