import { Redis } from "ioredis";
import { Redlock, resourceKeys, type Lease } from "@fenced/lock";
import { startRedisNodes } from "@fenced/servers";

export interface Narrator {
  step(event: Record<string, unknown> & { message: string }): void;
}

export interface ClockJumpResult {
  readonly scenario: "clock-jump";
  readonly bothBelieveTheyHold: boolean;
  readonly token1: bigint;
  readonly token2: bigint;
  readonly ordered: boolean;
}

/**
 * The Redlock failure from "How to do distributed locking": client 1 holds A, B, C; the wall clock
 * of node C jumps forward, so C expires client 1's key early; client 2 then gets C, D, E. Both
 * believe they hold the lock. The nodes are real redis-server processes; C runs under a clock shim.
 */
export async function clockJump(narrator: Narrator): Promise<ClockJumpResult> {
  const names = ["A", "B", "C", "D", "E"];
  narrator.step({ message: "starting 5 redis-server nodes A–E (node C with a clock that can jump)" });
  const cluster = await startRedisNodes(5, { clockControl: [2] });
  const clients = cluster.urls.map((url) => new Redis(url, { maxRetriesPerRequest: 1 }));
  const resource = "demo/file";
  const ttl = 10_000;
  try {
    const redlock1 = new Redlock(clients, { retryCount: 0 });
    const redlock2 = new Redlock(clients, { retryCount: 0 });
    const { lease: leaseKey } = resourceKeys(resource);

    // D and E are unreachable for client 1 (stands in for a network partition): they answer "held".
    await Promise.all(clients.slice(3).map((c) => c.set(leaseKey, "partitioned-from-client-1", "PX", 500)));
    const lease1: Lease = await redlock1.acquire(resource, ttl);
    narrator.step({ message: `client 1 acquires the lock on A, B, C (D, E unreachable): token ${lease1.token}, valid for ${lease1.remainingMs} ms`, client: 1, token: lease1.token.toString() });
    await new Promise((r) => setTimeout(r, 600));

    cluster.nodes[2]?.setClockOffsetMs(ttl * 2);
    narrator.step({ message: `the wall clock on node C jumps ${ttl * 2 / 1000} s forward; C expires client 1's key early`, node: "C" });
    const deadline = Date.now() + 2_000;
    while ((await clients[2]?.exists(leaseKey)) === 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));

    const lease2 = await redlock2.acquire(resource, ttl);
    const holders = await Promise.all(clients.map((c) => c.get(leaseKey)));
    const held2 = holders.flatMap((v, i) => (v === lease2.value ? [names[i]] : []));
    narrator.step({ message: `client 2 acquires the lock on ${held2.join(", ")}: token ${lease2.token}`, client: 2, token: lease2.token.toString() });

    const bothBelieveTheyHold = lease1.remainingMs > 0 && lease2.remainingMs > 0;
    narrator.step({
      message: bothBelieveTheyHold
        ? `both clients believe they hold the lock (client 1 for ${lease1.remainingMs} ms more, client 2 for ${lease2.remainingMs} ms)`
        : "the clients' leases did not overlap this time",
    });
    const ordered = lease2.token > lease1.token;
    narrator.step({
      message: ordered
        ? `the tokens still order them: ${lease1.token} < ${lease2.token}; a fenced store refuses client 1's writes once it has seen ${lease2.token}`
        : `tokens out of order: ${lease1.token} vs ${lease2.token}`,
    });
    await Promise.all([lease1.release(), lease2.release()]);
    return { scenario: "clock-jump", bothBelieveTheyHold, token1: lease1.token, token2: lease2.token, ordered };
  } finally {
    for (const c of clients) c.disconnect();
    await cluster.stop();
  }
}
