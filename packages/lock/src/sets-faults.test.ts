import { performance } from "node:perf_hooks";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { mulberry32 } from "@fenced/servers/random";
import { LockNotAcquiredError } from "./errors.js";
import { Redlock } from "./redlock.js";
import { leaseKeysOn } from "./sets-test-support.js";
import { countersOn, drained, loadScripts, ready, refusedReconnect, startTestNodes, type TestNodes } from "./test-support.js";

const A = "faulted-set/a";
const B = "faulted-set/b";

/** Sets acquired while nodes are killed or paused (PROTOCOL.md, "Sets": counted per resource by the same rule). */
describe("sets of resources while nodes fail", () => {
  let t: TestNodes;
  beforeAll(async () => {
    // The lock's clients fail fast on a killed node instead of queueing for it.
    t = await startTestNodes(5, { faults: true }, { failFast: true });
    await Promise.all(t.admin.map(loadScripts));
  });
  afterEach(async () => {
    await heal(t);
  });
  afterAll(async () => {
    await t?.stop();
  });

  it("300 acquisitions of [a, b], [b, a], a or b while a random minority is killed or paused, also mid-acquisition: each resource's tokens increase", async () => {
    const seed = Number(process.env.FENCED_SEED ?? Math.floor(Math.random() * 2 ** 31));
    const random = mulberry32(seed);
    const pick = (n: number): number => Math.floor(random() * n);
    const redlock = new Redlock(t.clients, { nodeTimeoutMs: 50, retryCount: 500, retryDelayMs: 10, retryJitterMs: 10 });
    const shapes: readonly (readonly string[])[] = [[A, B], [B, A], [A, B], [B, A], [A], [B]];
    const stats = { acquisitions: 0, sets: 0, kills: 0, pauses: 0, underFault: 0, midAcquisition: 0 };
    const last = new Map<string, bigint>([
      [A, 0n],
      [B, 0n],
    ]);

    /** Kills or pauses 0, 1 or 2 of the 5 nodes (always a minority). */
    const injure = async (): Promise<void> => {
      const candidates = [0, 1, 2, 3, 4];
      for (let k = pick(3); k > 0; k--) {
        const node = t.nodes[candidates.splice(pick(candidates.length), 1)[0]!]!;
        if (random() < 0.5) {
          await node.kill();
          stats.kills++;
        } else {
          node.pause();
          stats.pauses++;
        }
      }
    };

    const started = performance.now();
    let nextChange = 0;
    try {
      for (let i = 0; i < 300; i++) {
        const shape = shapes[pick(shapes.length)]!;
        let acquiring;
        if (i === nextChange) {
          await heal(t);
          // Half the time the faults land while the acquisition is under way.
          if (random() < 0.5) {
            acquiring = redlock.acquire(shape, 1_000);
            stats.midAcquisition++;
          }
          await injure();
          nextChange = i + 4 + pick(9);
        }
        const lease = await (acquiring ?? redlock.acquire(shape, 1_000));
        expect(lease.resources).toEqual(shape);
        for (const { resource, token } of lease.fences) {
          expect(
            token > last.get(resource)!,
            `acquisition ${i} of ${shape.join()}: ${resource} token ${token} after ${last.get(resource)}`,
          ).toBe(true);
          last.set(resource, token);
        }
        stats.acquisitions++;
        if (shape.length > 1) stats.sets++;
        if (t.nodes.some((n) => !n.running || n.paused)) stats.underFault++;
        await lease.release();
      }
    } catch (err) {
      throw new Error(`sets under faults failed with FENCED_SEED=${seed}: ${err instanceof Error ? err.message : String(err)}`, {
        cause: err,
      });
    } finally {
      await heal(t);
    }
    console.info(
      `sets under faults (FENCED_SEED=${seed}): ${JSON.stringify(stats)}, last tokens a ${last.get(A)}, b ${last.get(B)}, ${Math.round(performance.now() - started)} ms`,
    );
    expect(stats.acquisitions).toBe(300);
    expect(stats.sets).toBeGreaterThan(150);
    expect(stats.kills).toBeGreaterThan(5);
    expect(stats.pauses).toBeGreaterThan(5);
    expect(stats.underFault).toBeGreaterThan(100);
    // The invariant behind it, per resource: a majority of counters is at or above its last token.
    for (const r of [A, B]) {
      const counters = await countersOn(t.admin, r);
      expect(
        counters.filter((c) => c >= last.get(r)!).length,
        `${r}: counters ${counters.join(",")} (FENCED_SEED=${seed})`,
      ).toBeGreaterThanOrEqual(3);
    }
    const after = await redlock.acquire([B, A], 1_000);
    expect(after.fences.map((f) => f.token > last.get(f.resource)!)).toEqual([true, true]);
    await after.release();
  });

  it("3 of 5 nodes killed: LockNotAcquiredError naming both resources, and the 2 nodes that answered hold nothing", async () => {
    const [a, b] = ["majority-killed/a", "majority-killed/b"];
    const refused = Promise.all([0, 1, 2].map((i) => refusedReconnect(t.clients[i]!)));
    await Promise.all([0, 1, 2].map((i) => t.nodes[i]!.kill()));
    // Whether or not the clients know yet (a round sends nothing once no quorum is possible), the 2 alive nodes end up holding nothing.
    const error = await new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: 1_000 }).acquire([a, b], 5_000).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockNotAcquiredError);
    const failed = error as LockNotAcquiredError;
    expect(failed.resources).toEqual([a, b]);
    expect(failed.message).toContain(`could not acquire "${a}", "${b}" after 1 attempt(s)`);
    expect(failed.nodes.filter((n) => n.node < 3).every((n) => n.reason === "refused" || n.reason === "error")).toBe(true);
    await drained(t.admin.slice(3));
    expect(await leaseKeysOn(t.admin.slice(3), [a, b])).toEqual([
      [null, null],
      [null, null],
    ]);
    // Each node took the whole set or none of it: its two counters moved together.
    expect(await countersOn(t.admin.slice(3), a)).toEqual(await countersOn(t.admin.slice(3), b));

    // Once the clients know the 3 are down, retries are refused at once, naming both resources too.
    await refused;
    const again = await new Redlock(t.clients, { retryCount: 2, retryDelayMs: 10 }).acquire([b, a], 5_000).catch((e: unknown) => e);
    expect(again).toMatchObject({ name: "LockNotAcquiredError", resources: [b, a], attempts: 3 });
    expect(await leaseKeysOn(t.admin.slice(3), [a, b])).toEqual([
      [null, null],
      [null, null],
    ]);
  });

  it("3 of 5 nodes paused: LockNotAcquiredError naming both resources; nothing held on the nodes that answered, nor on the paused ones once they resume", async () => {
    const [a, b] = ["majority-paused/a", "majority-paused/b"];
    for (const i of [1, 2, 3]) t.nodes[i]!.pause();
    const error = await new Redlock(t.clients, { retryCount: 1, retryDelayMs: 10, nodeTimeoutMs: 100 })
      .acquire([a, b], 5_000)
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ name: "LockNotAcquiredError", resources: [a, b], attempts: 2 });
    const failures = (error as LockNotAcquiredError).nodes;
    expect(failures.filter((n) => n.node >= 1 && n.node <= 3)).toEqual([1, 2, 3].map((node) => ({ node, reason: "timeout" })));
    // A node that is up is named only if it missed nodeTimeoutMs (100 ms), which a busy machine can make it do.
    expect(failures.filter((n) => n.node === 0 || n.node === 4).every((n) => n.reason === "timeout")).toBe(true);
    // The two that answered granted both attempts (their counters moved), and were released before acquire() rejected.
    expect(await leaseKeysOn([t.admin[0]!, t.admin[4]!], [a, b])).toEqual([
      [null, null],
      [null, null],
    ]);
    expect(await countersOn([t.admin[0]!, t.admin[4]!], a)).toEqual([2n, 2n]);
    expect(await countersOn([t.admin[0]!, t.admin[4]!], b)).toEqual([2n, 2n]);
    // The paused ones run the queued ACQUIREs, then the RELEASEs queued behind them.
    for (const i of [1, 2, 3]) t.nodes[i]!.resume();
    await drained(t.clients);
    expect(await leaseKeysOn(t.admin, [a, b])).toEqual(Array(5).fill([null, null]));
    expect(await countersOn(t.admin, a)).toEqual(await countersOn(t.admin, b));
  });
});

/** Resumes paused nodes and restarts killed ones (with their data), and waits for their clients. */
async function heal(t: TestNodes): Promise<void> {
  await Promise.all(
    t.nodes.map(async (node, i) => {
      if (node.paused) node.resume();
      if (node.running) return;
      await node.restart({ keepData: true });
      await Promise.all([ready(t.clients[i]!), ready(t.admin[i]!)]);
      await loadScripts(t.admin[i]!);
    }),
  );
}
