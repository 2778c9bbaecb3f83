import { connectedPair, stallUntilUnread } from "@fenced/servers/sockets";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { RedisClient } from "./client.js";
import { notBefore } from "./not-before.js";
import { probeNodes } from "./probe.js";
import { AcquireTally, chooseToken, fanOut, quorumOf, type Grant, type Reply } from "./quorum.js";

type MaybeReply = Reply<Grant> | undefined;

// Small counters make ties (the interesting case) common; a few huge ones check that nothing goes through doubles.
const counter = fc.oneof(
  { weight: 9, arbitrary: fc.bigInt({ min: 0n, max: 12n }) },
  { weight: 1, arbitrary: fc.bigInt({ min: 2n ** 62n, max: 2n ** 63n - 2n }) },
);
const grantReply = fc
  .record({ granted: fc.boolean(), counter })
  .map(({ granted, counter }): Reply<Grant> => ({ ok: true, value: { granted, counters: [counter] } }));
const failedReply = fc.constantFrom("timeout", "error").map((reason): Reply<Grant> => ({
  ok: false,
  failure: reason === "timeout" ? { node: 0, reason } : { node: 0, reason, detail: "connection refused" },
}));
const reply = fc.oneof({ weight: 6, arbitrary: grantReply }, { weight: 1, arbitrary: failedReply });
const replySet = fc
  .integer({ min: 1, max: 9 })
  .chain((n) => fc.array(fc.option(reply, { nil: undefined, freq: 6 }), { minLength: n, maxLength: n }));

function granting(replies: readonly MaybeReply[]): { node: number; counter: bigint }[] {
  return replies.flatMap((r, node) => (r?.ok === true && r.value.granted ? [{ node, counter: r.value.counters[0]! }] : []));
}
function refusing(replies: readonly MaybeReply[]): { node: number; counter: bigint }[] {
  return replies.flatMap((r, node) => (r?.ok === true && !r.value.granted ? [{ node, counter: r.value.counters[0]! }] : []));
}
/** Replies that count against a quorum: refusals and failures (not the ones still outstanding). */
function refusedOrFailed(replies: readonly MaybeReply[]): number {
  return replies.filter((r) => r !== undefined && (!r.ok || !r.value.granted)).length;
}

describe("quorumOf", () => {
  it("is a strict majority", () => {
    expect([1, 2, 3, 4, 5, 6, 7].map(quorumOf)).toEqual([1, 2, 2, 3, 3, 4, 4]);
  });
});

describe("chooseToken", () => {
  it("picks a token no granting counter exceeds, above any refusing counter ahead of all grants; counts exactly the granting nodes at the token", () => {
    fc.assert(
      fc.property(replySet, (replies) => {
        const quorum = quorumOf(replies.length);
        const grants = granting(replies);
        const refusals = refusing(replies);
        const choice = chooseToken(replies, quorum);
        if (grants.length < quorum) {
          expect(choice).toBeUndefined();
          return;
        }
        expect(choice).toBeDefined();
        const { token, counted, behind } = choice!;
        const grantMax = grants.reduce((m, g) => (g.counter > m ? g.counter : m), -1n);
        for (const g of grants) expect(token >= g.counter).toBe(true);
        for (const r of refusals) if (r.counter > grantMax) expect(token > r.counter).toBe(true);
        // Without evidence of a node ahead of the grants, the token is the granting maximum itself (no invented gaps).
        if (refusals.every((r) => r.counter <= grantMax)) expect(token).toBe(grantMax);
        else expect(token).toBe(refusals.reduce((m, r) => (r.counter > m ? r.counter : m), -1n) + 1n);
        expect(counted).toEqual(grants.filter((g) => g.counter === token).map((g) => g.node));
        expect(behind).toEqual(grants.filter((g) => g.counter !== token).map((g) => g.node));
        for (const node of behind) {
          const r = replies[node];
          expect(r?.ok === true && r.value.counters[0]! < token).toBe(true);
        }
      }),
      { numRuns: 2_000 },
    );
  });

  it("ignores failed and outstanding nodes", () => {
    const grant = (counter: bigint, granted = true): Reply<Grant> => ({ ok: true, value: { granted, counters: [counter] } });
    const replies: MaybeReply[] = [grant(7n), { ok: false, failure: { node: 1, reason: "timeout" } }, grant(5n), undefined, grant(7n)];
    expect(chooseToken(replies, 3)).toEqual({ token: 7n, counted: [0, 4], behind: [2] });
    expect(chooseToken([grant(3n), grant(9n, false), grant(3n)], 2)).toEqual({ token: 10n, counted: [], behind: [0, 2] });
    expect(chooseToken([grant(3n), grant(3n, false), grant(3n)], 2)).toEqual({ token: 3n, counted: [0, 2], behind: [] });
  });
});

describe("AcquireTally", () => {
  it("decides exactly when the replies so far give a counted quorum or leave no quorum possible, in any arrival order", () => {
    const arrivals = fc
      .integer({ min: 1, max: 9 })
      .chain((n) => fc.array(reply, { minLength: n, maxLength: n }))
      .chain((replies) => fc.tuple(fc.constant(replies), fc.shuffledSubarray([...replies.keys()], { minLength: replies.length })));
    fc.assert(
      fc.property(arrivals, ([replies, order]) => {
        const n = replies.length;
        const quorum = quorumOf(n);
        const tally = new AcquireTally(n, quorum);
        const seen: MaybeReply[] = new Array<MaybeReply>(n).fill(undefined);
        for (const node of order) {
          seen[node] = replies[node];
          const decided = tally.add(replies[node]!);
          const counted = chooseToken(seen, quorum)?.counted.length ?? 0;
          const hopeless = refusedOrFailed(seen) > n - quorum;
          expect(decided).toBe(counted >= quorum || hopeless);
        }
      }),
      { numRuns: 2_000 },
    );
  });
});

describe("the protocol over a model of N nodes without data loss", () => {
  /**
   * Each step is one acquisition: a random set of nodes grants (INCR), the rest refuse or fail,
   * replies arrive in random order and the fan-out stops where AcquireTally decides (as fanOut does);
   * then publish raises a random subset of the nodes that are behind. Whenever the client ends with
   * a counted quorum it is handed the token: those tokens must strictly increase.
   */
  it("hands out strictly increasing tokens whatever the grants, arrival orders and publish outcomes", () => {
    const step = fc.record({
      outcome: fc.array(
        fc.oneof(
          { weight: 6, arbitrary: fc.constant("grant") },
          { weight: 2, arbitrary: fc.constant("refuse") },
          { weight: 1, arbitrary: fc.constant("fail") },
        ),
        { minLength: 9, maxLength: 9 },
      ),
      order: fc.shuffledSubarray([0, 1, 2, 3, 4, 5, 6, 7, 8], { minLength: 9 }),
      publishReaches: fc.array(fc.boolean(), { minLength: 9, maxLength: 9 }),
    });
    let issuedInAllRuns = 0;
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 9 }), fc.array(step, { minLength: 1, maxLength: 60 }), (n, steps) => {
        const quorum = quorumOf(n);
        const counters = new Array<bigint>(n).fill(0n);
        let lastIssued = 0n;
        for (const { outcome, order, publishReaches } of steps) {
          const replies: Reply<Grant>[] = counters.map((c, node) => {
            const what = outcome[node]!;
            if (what === "fail") return { ok: false, failure: { node, reason: "timeout" } };
            if (what === "refuse") return { ok: true, value: { granted: false, counters: [c] } };
            counters[node] = c + 1n;
            return { ok: true, value: { granted: true, counters: [c + 1n] } };
          });
          const tally = new AcquireTally(n, quorum);
          const arrived: MaybeReply[] = new Array<MaybeReply>(n).fill(undefined);
          for (const node of order.filter((i) => i < n)) {
            arrived[node] = replies[node];
            if (tally.add(replies[node]!)) break;
          }
          const choice = chooseToken(arrived, quorum);
          if (choice === undefined) continue;
          let counted = choice.counted.length;
          for (const node of choice.behind) {
            if (counted >= quorum) break;
            if (!publishReaches[node]) continue;
            if (counters[node]! < choice.token) {
              counters[node] = choice.token;
              counted++;
            }
          }
          if (counted < quorum) continue;
          expect(choice.token > lastIssued).toBe(true);
          lastIssued = choice.token;
          issuedInAllRuns++;
        }
      }),
      { numRuns: 1_000 },
    );
    // The property is only worth something if the model does hand out tokens.
    expect(issuedInAllRuns).toBeGreaterThan(2_000);
  });
});

describe("fanOut's node timeout", () => {
  /** Keeps the event loop busy for `ms`, so that Node's cached millisecond clock falls behind. */
  const busy = (ms: number): void => {
    const until = performance.now() + ms;
    while (performance.now() < until);
  };

  /**
   * Many fan-outs over three nodes, started a little apart while the loop is busy: node 0 answers at
   * once, nodes 1 and 2 never. `decidedByFirst`: node 0's answer decides (the round ends sooner and the
   * silent nodes are told `timeout` later); otherwise the round waits out its timeout.
   */
  async function silentNodes(decidedByFirst: boolean): Promise<{ roundMs: number[]; toldMs: number[] }> {
    const roundMs: number[] = [];
    const toldMs: number[] = [];
    const rounds = Array.from({ length: 400 }, (_, i) =>
      new Promise<void>((started) => setTimeout(started, i % 17)).then(async () => {
        const timeoutMs = 3 + (i % 5);
        const start = performance.now();
        const round = fanOut<unknown>(3, timeoutMs, {
          send: (node) => (node === 0 ? Promise.resolve("OK") : new Promise(() => undefined)),
          decided: () => decidedByFirst,
          observe: (node, ms, failure) => {
            if (node !== 0) toldMs.push(ms - timeoutMs);
            if (node !== 0) expect(failure?.reason).toBe("timeout");
          },
        });
        busy(0.2);
        await round;
        if (!decidedByFirst) roundMs.push(performance.now() - start - timeoutMs);
      }),
    );
    await Promise.all(rounds);
    await expect.poll(() => toldMs.length).toBe(800);
    return { roundMs, toldMs };
  }

  // A Node timer can fire a millisecond early by performance.now() (not-before.ts); before it was
  // guarded, some of these fan-outs told a silent node `timeout` too soon.
  it("tells a silent node timeout no sooner than timeoutMs after the fan-out began, also when the round ended sooner", async () => {
    const { toldMs } = await silentNodes(true);
    expect(Math.min(...toldMs)).toBeGreaterThanOrEqual(0);
  });

  it("ends a round that waits for its nodes no sooner than timeoutMs after it began", async () => {
    const { roundMs, toldMs } = await silentNodes(false);
    expect(Math.min(...roundMs)).toBeGreaterThanOrEqual(0);
    expect(Math.min(...toldMs)).toBeGreaterThanOrEqual(0);
  });
});

describe("fanOut and probeNodes after a stall of the event loop", () => {
  /**
   * A node whose answer is a byte on a real socket (as a Redis reply is): `answer()` sends it, the
   * node's call resolves once the loop has read it, and `stall(ms)` stalls the loop for at least `ms`
   * and until the answer waits unread. Runs `body` with the connected pair.
   */
  async function withAnsweringNode(
    body: (node: { call(): Promise<unknown>; answer(): void; stall(ms: number): void }) => Promise<void>,
  ): Promise<void> {
    const { client, peer, close } = await connectedPair();
    try {
      await body({
        call: () => new Promise((resolve) => client.once("data", () => resolve("OK"))),
        answer: () => peer.write("+OK\r\n"),
        stall: (ms) => stallUntilUnread([client], ms),
      });
    } finally {
      close();
    }
  }

  // The loop stalls past the timeout while the answer arrives: the timer and the answer are due on one turn.
  it("counts a node whose answer arrived during the stall, rather than calling it a timeout", async () => {
    await withAnsweringNode(async (node) => {
      const told: (string | undefined)[] = [];
      const round = fanOut<unknown>(1, 20, {
        send: () => node.call(),
        decided: () => false,
        observe: (_, __, failure) => told.push(failure?.reason),
      });
      node.answer();
      node.stall(40);
      expect(await round).toEqual([{ ok: true, value: "OK" }]);
      expect(told).toEqual([undefined]);
    });
  });

  it("after a round decided without it, tells a node whose answer arrived during the stall answered, not timed out", async () => {
    await withAnsweringNode(async (node) => {
      const told: [number, string | undefined][] = [];
      const round = fanOut<unknown>(2, 20, {
        send: (n) => (n === 0 ? Promise.resolve("OK") : node.call()),
        decided: () => true,
        observe: (n, _, failure) => told.push([n, failure?.reason]),
      });
      await round;
      node.answer();
      node.stall(40);
      await expect.poll(() => told.length).toBe(2);
      expect(told).toEqual([
        [0, undefined],
        [1, undefined],
      ]);
    });
  });

  it("probeNodes: after a stall past its grace and its deadline, counts a node whose PONG arrived during it", async () => {
    await withAnsweringNode(async (node) => {
      const at = (answer: () => Promise<unknown>): RedisClient => ({
        ping: answer,
        evalsha: () => Promise.reject(new Error("unused")),
        eval: () => Promise.reject(new Error("unused")),
        script: () => Promise.reject(new Error("unused")),
      });
      const clients = [at(() => Promise.resolve("PONG")), at(() => Promise.resolve("PONG")), at(() => node.call().then(() => "PONG"))];
      const probing = probeNodes({ clients, quorum: 2 }, 20);
      // Nodes 0 and 1 have answered (a quorum: the grace, at least 10 ms, is armed) before the loop stalls.
      await Promise.resolve();
      node.answer();
      node.stall(40);
      expect((await probing).nodes.map((n) => n.state)).toEqual(["up", "up", "up"]);
    });
  });
});

describe("notBefore", () => {
  it("waits past Node's longest timer (Infinity included) without firing, and cancels", async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error): number => warnings.push(w.name);
    process.on("warning", onWarning);
    try {
      let fired = 0;
      const cancels = [Infinity, 2 ** 31, 3e10].map((ms) => notBefore(performance.now(), ms, () => fired++, { unref: true }));
      await new Promise((resolve) => setTimeout(resolve, 50));
      for (const cancel of cancels) cancel();
      // Node's fallback for an over-long timer is 1 ms with a TimeoutOverflowWarning: neither happened.
      expect(fired).toBe(0);
      expect(warnings).not.toContain("TimeoutOverflowWarning");
    } finally {
      process.off("warning", onWarning);
    }
  });
});
