import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { ANSWERING_NODE_TIMEOUT_MS } from "@fenced/servers";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { mulberry32 } from "@fenced/servers/random";
import { LockNotAcquiredError } from "./errors.js";
import { Redlock } from "./redlock.js";
import { countersOn, holdAs, leaseValuesOn, loadScripts, maxOf, ready, startTestNodes, type TestNodes } from "./test-support.js";

describe("faults on a minority of 5 nodes", () => {
  let t: TestNodes;
  beforeAll(async () => {
    // The lock's clients fail fast on a killed node instead of queueing for it.
    t = await startTestNodes(5, { faults: true }, { failFast: true });
    await Promise.all(t.admin.map(loadScripts));
  });
  afterAll(async () => {
    await t?.stop();
  });

  describe("a loser's partial acquisition is released", () => {
    it("3 nodes held by another client: acquire fails with 'held' from those 3, and the 2 it got are released before it rejects", async () => {
      const resource = "partial";
      for (const redis of t.admin.slice(0, 3)) await holdAs(redis, resource, "other-client", 30_000);
      // Every node answers: a node timeout far above any answer, so that none reads as a timeout on a busy machine.
      const loser = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
      const error = await loser.acquire(resource, 10_000).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockNotAcquiredError);
      const { nodes } = error as LockNotAcquiredError;
      expect(nodes.filter((n) => n.reason === "held").map((n) => n.node)).toEqual([0, 1, 2]);
      // D and E either granted (not a failure) or had not answered when the 3 refusals decided the attempt.
      expect(nodes.filter((n) => n.node >= 3).every((n) => n.reason === "unanswered")).toBe(true);

      expect(await leaseValuesOn(t.admin, resource)).toEqual(["other-client", "other-client", "other-client", null, null]);
      // D and E really granted (their counters moved), so the empty keys are the loser's release at work.
      expect(await countersOn(t.admin, resource)).toEqual([0n, 0n, 0n, 1n, 1n]);
    });

    it("a free node that timed out during the attempt gets the release too: once it resumes, its key is gone", async () => {
      const resource = "partial-paused";
      for (const redis of t.admin.slice(0, 3)) await holdAs(redis, resource, "other-client", 30_000);
      const loserClients = await t.moreClients();
      // The three refusals decide the attempt, not the paused node's timeout: a node timeout far above any
      // answer keeps A, B and C out of the timeouts on a busy machine, and costs nothing.
      const loser = new Redlock(loserClients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
      const paused = t.nodes[4]!;
      paused.pause();
      let error: unknown;
      try {
        error = await loser.acquire(resource, 10_000).catch((e: unknown) => e);
      } finally {
        paused.resume();
      }
      expect(error).toBeInstanceOf(LockNotAcquiredError);
      const { nodes } = error as LockNotAcquiredError;
      expect(nodes.filter((n) => n.reason === "held").map((n) => n.node)).toEqual([0, 1, 2]);
      expect(nodes.find((n) => n.node === 4)?.reason).toMatch(/^(timeout|unanswered)$/);
      // Commands on one connection run in order: once a PING sent now is answered, the queued acquire and release have run.
      expect(await loserClients[4]!.ping()).toBe("PONG");
      expect(await leaseValuesOn(t.admin, resource)).toEqual(["other-client", "other-client", "other-client", null, null]);
      // E did run the late acquire (its counter moved), and then the release that followed it.
      expect(await countersOn(t.admin, resource)).toEqual([0n, 0n, 0n, 1n, 1n]);
    });
  });

  it("on a node that lost its script cache, an acquire answered after its attempt ended does not run after that attempt's release", async () => {
    // C restarts (empty script cache) and then serves a release before any acquire: it now knows the
    // release script but not the acquire script.
    const before = await new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS }).acquire(
      "script-cache/before",
      10_000,
    );
    await restart(t, 2, true, "empty script cache");
    await before.release();
    await released(t, "script-cache/before");

    // C is silent while an acquisition is decided by A, B, D, E and released again.
    const resource = "script-cache/after";
    const nodeC = t.nodes[2]!;
    nodeC.pause();
    try {
      // A, B, D and E decide it (C is not waited for): they must answer within the node timeout.
      const lease = await new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS }).acquire(resource, 10_000);
      await lease.release();
    } finally {
      nodeC.resume();
    }
    // C now answers NOSCRIPT to the acquire, and runs the release (a no-op: it holds nothing yet).
    // Running the acquire now, after its release, would leave a lease key on C for the whole TTL.
    expect(await t.clients[2]!.ping()).toBe("PONG");
    await sleep(100);
    expect(await t.clients[2]!.ping()).toBe("PONG");
    expect(await leaseValuesOn(t.admin, resource)).toEqual([null, null, null, null, null]);
  });

  it("≥ 1,000 sequential acquisitions while a random minority is killed/restarted or paused/resumed: every token > the previous", async () => {
    const seed = Number(process.env.FENCED_SEED ?? Math.floor(Math.random() * 2 ** 31));
    const random = mulberry32(seed);
    const pick = (n: number): number => Math.floor(random() * n);
    const resource = "monotonic-under-faults";
    const redlock = new Redlock(t.clients, { nodeTimeoutMs: 50, retryCount: 500, retryDelayMs: 10, retryJitterMs: 10 });
    const faulted = new Map<number, "killed" | "paused">();
    const stats = { acquisitions: 0, kills: 0, pauses: 0, acquisitionsUnderFault: 0, faultHandlingMs: 0 };

    const heal = async (): Promise<void> => {
      await Promise.all(
        [...faulted].map(async ([index, kind]) => {
          const node = t.nodes[index]!;
          if (kind === "paused") node.resume();
          else {
            await node.restart({ keepData: true });
            await Promise.all([ready(t.clients[index]!), ready(t.admin[index]!)]);
          }
        }),
      );
      faulted.clear();
    };
    const injure = async (): Promise<void> => {
      const count = pick(3); // 0, 1 or 2 of 5: always a minority
      const candidates = [0, 1, 2, 3, 4];
      for (let k = 0; k < count; k++) {
        const index = candidates.splice(pick(candidates.length), 1)[0]!;
        const node = t.nodes[index]!;
        if (random() < 0.5) {
          await node.kill();
          faulted.set(index, "killed");
          stats.kills++;
        } else {
          node.pause();
          faulted.set(index, "paused");
          stats.pauses++;
        }
      }
    };

    const started = performance.now();
    let previous = 0n;
    let nextChange = 0;
    try {
      for (let i = 0; i < 1_000; i++) {
        if (i === nextChange) {
          const t0 = performance.now();
          await heal();
          await injure();
          stats.faultHandlingMs += Math.round(performance.now() - t0);
          nextChange = i + 4 + pick(9);
        }
        const lease = await redlock.acquire(resource, 1_000);
        expect(lease.token > previous, `acquisition ${i}: token ${lease.token} after ${previous}`).toBe(true);
        previous = lease.token;
        stats.acquisitions++;
        if (faulted.size > 0) stats.acquisitionsUnderFault++;
        await lease.release();
      }
    } catch (err) {
      throw new Error(`monotonic-under-faults failed with FENCED_SEED=${seed}: ${err instanceof Error ? err.message : String(err)}`, {
        cause: err,
      });
    } finally {
      await heal();
    }
    console.info(
      `monotonic under faults (FENCED_SEED=${seed}): ${JSON.stringify(stats)}, last token ${previous}, ${Math.round(performance.now() - started)} ms`,
    );

    expect(stats.acquisitions).toBe(1_000);
    expect(stats.kills).toBeGreaterThan(10);
    expect(stats.pauses).toBeGreaterThan(10);
    expect(stats.acquisitionsUnderFault).toBeGreaterThan(300);
    // The invariant behind it: a majority of counters is at or above the last token handed out.
    const counters = await countersOn(t.admin, resource);
    expect(
      counters.filter((c) => c >= previous).length,
      `counters ${counters.join(",")} vs last token ${previous} (FENCED_SEED=${seed})`,
    ).toBeGreaterThanOrEqual(3);
    const after = await redlock.acquire(resource, 1_000);
    expect(after.token > previous).toBe(true);
    await after.release();
  });
});

/** PROTOCOL.md, "What a node must keep across restarts — and what happens if it does not". */
describe("a node restarted without its data", () => {
  let t: TestNodes;
  beforeAll(async () => {
    t = await startTestNodes(5, { faults: true, persistence: "fsync-always" }, { failFast: true });
    await Promise.all(t.admin.map(loadScripts));
  });
  afterEach(async () => {
    await Promise.all(t.nodes.map((node, i) => (node.running ? Promise.resolve() : restart(t, i, true))));
  });
  afterAll(async () => {
    await t?.stop();
  });

  /**
   * Counters [8, 8, 0, 3, 3] on A..E, with tokens 1..8 handed out: D and E were down for the last 5
   * acquisitions (and came back with their data: appendfsync always kept their 3), then C was wiped.
   */
  async function lagBehindAndWipeC(redlock: Redlock, resource: string): Promise<bigint[]> {
    // Exact counters and tokens: every node that is up must count in every round (the Redlock's node timeout is far above any answer).
    const tokens = await acquireReleaseTimes(redlock, resource, 3);
    // release() returns once a majority answered: let the last nodes finish before killing any,
    // or a node could come back holding the last lease's key (kill -9 between its acquire and release).
    await released(t, resource);
    await Promise.all([t.nodes[3]!.kill(), t.nodes[4]!.kill()]);
    tokens.push(...(await acquireReleaseTimes(redlock, resource, 5)));
    await released(t, resource);
    await Promise.all([restart(t, 3, true), restart(t, 4, true)]);
    await restart(t, 2, false);
    expect(await countersOn(t.admin, resource)).toEqual([8n, 8n, 0n, 3n, 3n]);
    expect(tokens).toEqual([1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n]);
    return tokens;
  }

  it("a SIGKILLed node with appendfsync always comes back with every counter it acknowledged", async () => {
    const resource = "restart/keeps";
    const redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    const tokens = await acquireReleaseTimes(redlock, resource, 4);
    await released(t, resource);
    const before = await countersOn(t.admin, resource);
    expect(before[2]).toBe(tokens.at(-1));
    await restart(t, 2, true);
    expect(await countersOn(t.admin, resource)).toEqual(before);
  });

  it("wiped C, and A and B (which kept the highest counters) refusing: their counters in the refusal push the token past every earlier one", async () => {
    const resource = "restart/wiped-refusing";
    const redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    const earlier = await lagBehindAndWipeC(redlock, resource);
    for (const redis of t.admin.slice(0, 2)) await holdAs(redis, resource, "another-holder", 10_000);
    // C, D and E grant with 1, 4, 4 — their maximum, 4, repeats a token handed out before. A and B
    // refuse but report 8, so the candidate is 9, published to C, D and E.
    const lease = await redlock.acquire(resource, 5_000);
    expect(lease.token).toBe(9n);
    expect(lease.token > maxOf(earlier)).toBe(true);
    expect(await countersOn(t.admin, resource)).toEqual([8n, 8n, 9n, 9n, 9n]);
    await lease.release();
  });

  it("wiped C, and A and B down: the token goes backwards — why lock nodes must keep appendonly yes + appendfsync always", async () => {
    const resource = "restart/wiped-down";
    const redlock = new Redlock(t.clients, { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    const earlier = await lagBehindAndWipeC(redlock, resource);
    await Promise.all([t.nodes[0]!.kill(), t.nodes[1]!.kill()]);
    // Nobody reports 8 now: C, D and E grant with 1, 4, 4 and the lock hands out 4 again.
    const lease = await redlock.acquire(resource, 5_000);
    expect(lease.token <= maxOf(earlier)).toBe(true);
    expect(earlier).toContain(lease.token);
    expect(lease.token).toBe(4n);
    await lease.release();
  });
});

async function acquireReleaseTimes(redlock: Redlock, resource: string, times: number): Promise<bigint[]> {
  const tokens: bigint[] = [];
  for (let i = 0; i < times; i++) {
    const lease = await redlock.acquire(resource, 5_000);
    tokens.push(lease.token);
    await lease.release();
  }
  return tokens;
}

/** Waits until no running node holds a lease key for the resource. */
async function released(t: TestNodes, resource: string): Promise<void> {
  const running = t.admin.filter((_, i) => t.nodes[i]!.running);
  const deadline = Date.now() + 2_000;
  while ((await leaseValuesOn(running, resource)).some((v) => v !== null)) {
    if (Date.now() > deadline) throw new Error(`a lease key on ${resource} was not released`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function restart(
  t: TestNodes,
  index: number,
  keepData: boolean,
  scripts: "load scripts" | "empty script cache" = "load scripts",
): Promise<void> {
  await t.nodes[index]!.restart({ keepData });
  await Promise.all([ready(t.clients[index]!), ready(t.admin[index]!)]);
  if (scripts === "load scripts") await loadScripts(t.admin[index]!);
}
