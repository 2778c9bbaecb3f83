import dns from "node:dns";
import { errorMonitor, EventEmitter, once } from "node:events";
import { performance } from "node:perf_hooks";
import { ANSWERING_NODE_TIMEOUT_MS } from "@fenced/servers";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { LockNotAcquiredError, type NodeFailure } from "./errors.js";
import { Redlock } from "./redlock.js";
import { SCRIPTS } from "./scripts.js";
import {
  connect,
  counterOn,
  countersOn,
  drained,
  leaseValuesOn,
  loadScripts,
  ready,
  refusedReconnect,
  startTestNodes,
  type TestNodes,
} from "./test-support.js";

/** A client as an application configures one: ioredis's defaults (offline queue, retries, backoff), and an "error" listener. */
async function appClient(node: TestNodes["nodes"][number]): Promise<Redis> {
  const client = new Redis({ host: node.host, port: node.port, lazyConnect: true });
  client.on("error", () => undefined);
  await client.connect();
  return client;
}

/** Kills nodes and resolves once their clients have had a reconnect refused (the lock then knows them down). */
async function killAndWait(t: TestNodes, clients: readonly Redis[], nodes: readonly number[]): Promise<void> {
  const refused = Promise.all(nodes.map((i) => refusedReconnect(clients[i]!)));
  await Promise.all(nodes.map((i) => t.nodes[i]!.kill()));
  await refused;
}

async function acquireError(redlock: Redlock, resource: string): Promise<{ error: LockNotAcquiredError; ms: number }> {
  const start = performance.now();
  const error = await redlock.acquire(resource, 10_000).catch((e: unknown) => e);
  const ms = performance.now() - start;
  if (!(error instanceof LockNotAcquiredError)) throw new Error(`expected LockNotAcquiredError, got ${String(error)}`);
  return { error, ms };
}

function reasonOf(error: LockNotAcquiredError, node: number): NodeFailure | undefined {
  return error.nodes.find((n) => n.node === node);
}

/**
 * ioredis clients as an application configures them: the offline queue on (commands to a node that
 * is down wait for it to come back), and an "error" listener of the application's.
 */
describe("what the nodes of a failed acquisition say, with the clients' offline queues on", () => {
  let t: TestNodes;
  let clients: Redis[];
  beforeAll(async () => {
    t = await startTestNodes(3, { faults: true });
    await Promise.all(t.admin.map(loadScripts));
    clients = await Promise.all(t.nodes.map(appClient));
    // As in an application, a Redlock over the clients exists before any node fails: the lock watches a
    // client's connection from the first Redlock constructed over it, and knows only what it saw since.
    new Redlock(clients);
  });
  afterEach(async () => {
    for (const [i, node] of t.nodes.entries()) {
      if (node.paused) node.resume();
      if (!node.running) await node.restart({ keepData: true });
      await ready(clients[i]!, 10_000);
      await ready(t.admin[i]!);
      await loadScripts(t.admin[i]!);
    }
  });
  afterAll(async () => {
    for (const client of clients ?? []) client.disconnect();
    await t?.stop();
  });

  it("2 of 3 nodes killed: `refused` with ECONNREFUSED, without waiting nodeTimeoutMs per round", async () => {
    await killAndWait(t, clients, [1, 2]);

    const nodeTimeoutMs = 2_000;
    const once = await acquireError(new Redlock(clients, { retryCount: 0, nodeTimeoutMs }), "killed/once");
    expect(reasonOf(once.error, 1)).toMatchObject({ reason: "refused", code: "ECONNREFUSED" });
    expect(reasonOf(once.error, 2)).toMatchObject({ reason: "refused", code: "ECONNREFUSED" });
    // No quorum was possible before anything was sent: the node that is up was not asked either.
    expect(reasonOf(once.error, 0)).toEqual({ node: 0, reason: "unanswered" });
    expect(await counterOn(t.admin[0]!, "killed/once")).toBe(0n);
    // Nothing was sent, so nothing waited: a round that waited for a node would take nodeTimeoutMs.
    expect(once.ms).toBeLessThan(nodeTimeoutMs / 4);
    const again = await acquireError(new Redlock(clients, { retryCount: 0, nodeTimeoutMs }), "killed/again");
    expect(again.ms).toBeLessThan(nodeTimeoutMs / 4);

    // The defaults: 11 attempts, 200–300 ms apart. What remains is the retry delays, not a node timeout per round.
    const defaults = await acquireError(new Redlock(clients), "killed/defaults");
    expect(defaults.error.attempts).toBe(11);
    expect(defaults.error.nodes.filter((n) => n.reason === "refused").map((n) => n.node)).toEqual([1, 2]);
    console.info(
      `2 of 3 nodes killed: LockNotAcquiredError after ${Math.round(once.ms)} ms, then ${Math.round(again.ms)} ms (retryCount 0), ${Math.round(defaults.ms)} ms (defaults)`,
    );
    // 10 delays of at most 300 ms. A node timeout (200 ms) waited in each of the 11 rounds would add 2.2 s
    // to delays of at least 10 × 200 ms: 4.2 s at the least. The bound leaves a busy machine half of that 2.2 s.
    expect(defaults.ms).toBeLessThan(10 * 300 + (11 * 200) / 2);
  });

  it("nodes killed just before the round: their queued commands are given up once their clients see a reconnect refused", async () => {
    await Promise.all([t.nodes[1]!.kill(), t.nodes[2]!.kill()]);
    // The clients have not tried to reconnect yet (ioredis waits 50 ms first): the commands are queued.
    const { error, ms } = await acquireError(new Redlock(clients, { retryCount: 0, nodeTimeoutMs: 3_000 }), "killed/during");
    expect(reasonOf(error, 1)).toMatchObject({ reason: "refused", code: "ECONNREFUSED" });
    expect(reasonOf(error, 2)).toMatchObject({ reason: "refused", code: "ECONNREFUSED" });
    expect(ms).toBeLessThan(1_000);

    // The attempt's RELEASE was queued behind its ACQUIRE on the killed nodes: once they are back and
    // have run their clients' queues, no lease key is left anywhere.
    await Promise.all([t.nodes[1]!.restart({ keepData: true }), t.nodes[2]!.restart({ keepData: true })]);
    await Promise.all(clients.map((c) => ready(c, 10_000)));
    await drained(clients);
    // The restarts emptied the script caches, so the queued ACQUIRE only loaded its script there (see
    // fallBack). Which nodes get a failed attempt's RELEASE: the next describe.
    expect(await leaseValuesOn(t.admin, "killed/during")).toEqual([null, null, null]);
    expect(await countersOn(t.admin, "killed/during")).toEqual([1n, 0n, 0n]);
  });

  it("2 of 3 nodes paused: `timeout` (their connections are open, they just do not answer)", async () => {
    t.nodes[1]!.pause();
    t.nodes[2]!.pause();
    const { error, ms } = await acquireError(new Redlock(clients, { retryCount: 0, nodeTimeoutMs: 200 }), "paused");
    expect(reasonOf(error, 1)).toEqual({ node: 1, reason: "timeout" });
    expect(reasonOf(error, 2)).toEqual({ node: 2, reason: "timeout" });
    expect(ms).toBeGreaterThanOrEqual(190);
  });

  it("a restarted node counts again as soon as its client is connected", async () => {
    await killAndWait(t, clients, [2]);
    // Once back, the node must answer (after its NOSCRIPT fallback: the restart emptied its script cache) within the node timeout.
    const alone = new Redlock([clients[2]!], { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    const { error } = await acquireError(alone, "restarted");
    expect(error.nodes).toEqual([expect.objectContaining({ node: 0, reason: "refused", code: "ECONNREFUSED" })]);
    await t.nodes[2]!.restart({ keepData: true });
    await ready(clients[2]!, 10_000);
    await (await alone.acquire("restarted", 10_000)).release();
  });

  it("a host with two addresses, both refusing (Node's happy eyeballs: an AggregateError without a syscall): `refused` at once", async () => {
    // A name that resolves to 127.0.0.1 and ::1, as `localhost` does where /etc/hosts lists both, or a
    // dual-stack DNS name. Node then tries each address and, when none accepts, fails the connection
    // with an AggregateError (code ECONNREFUSED, one error per address, no syscall of its own).
    const DUAL = "dual-stack.test";
    const lookup = dns.lookup;
    dns.lookup = ((host: string, options: unknown, callback?: unknown): void => {
      const cb = (typeof options === "function" ? options : callback) as (...args: unknown[]) => void;
      const all = typeof options === "object" && options !== null && (options as { all?: boolean }).all === true;
      if (host !== DUAL) return void (lookup as (...args: unknown[]) => void)(host, options, callback);
      const addresses = [
        { address: t.nodes[0]!.host, family: 4 },
        { address: "::1", family: 6 },
      ];
      if (all) cb(null, addresses);
      else cb(null, addresses[0]!.address, 4);
    }) as typeof dns.lookup;
    const client = new Redis({ host: DUAL, port: t.nodes[0]!.port, lazyConnect: true });
    try {
      const errors: unknown[] = [];
      client.on("error", (err) => errors.push(err));
      await client.connect();
      new Redlock([client]);
      await killAndWait(t, [client], [0]);
      expect(errors.at(-1)).toBeInstanceOf(AggregateError);

      const { error, ms } = await acquireError(new Redlock([client], { retryCount: 0, nodeTimeoutMs: 5_000 }), "dual-stack");
      expect(error.nodes).toEqual([
        {
          node: 0,
          reason: "refused",
          code: "ECONNREFUSED",
          detail: `connect ECONNREFUSED ${t.nodes[0]!.host}:${t.nodes[0]!.port}; connect ECONNREFUSED ::1:${t.nodes[0]!.port}`,
        },
      ]);
      expect(ms).toBeLessThan(500);
    } finally {
      client.disconnect();
      dns.lookup = lookup;
    }
  });

  it("an application that removes the client's listeners (removeAllListeners): the lock watches it again, and a stale error never fails it", async () => {
    const client = await appClient(t.nodes[0]!);
    const redlock = new Redlock([client], { retryCount: 0, nodeTimeoutMs: 5_000 });
    try {
      await killAndWait(t, [client], [0]);
      expect((await acquireError(redlock, "unwatched")).error.nodes).toEqual([expect.objectContaining({ reason: "refused" })]);

      // The application drops every listener of the client, the lock's too, and adds its own back.
      client.removeAllListeners();
      client.on("error", () => undefined);
      await t.nodes[0]!.restart({ keepData: true });
      await ready(client, 10_000);
      await loadScripts(t.admin[0]!);
      // The connection drops and comes back: the refusal seen before the listeners went says nothing of it.
      const reconnecting = once(client, "reconnecting");
      client.disconnect(true);
      await reconnecting;
      expect(client.status).toBe("reconnecting");
      await (await redlock.acquire("unwatched", 10_000)).release();

      // Watched again: a kill is known at once, and the node counts again once its client is back.
      expect((client as unknown as NodeJS.EventEmitter).listenerCount(errorMonitor)).toBe(1);
      await killAndWait(t, [client], [0]);
      const { error, ms } = await acquireError(redlock, "unwatched");
      expect(error.nodes).toEqual([expect.objectContaining({ node: 0, reason: "refused", code: "ECONNREFUSED" })]);
      expect(ms).toBeLessThan(500);
      await t.nodes[0]!.restart({ keepData: true });
      await ready(client, 10_000);
      await loadScripts(t.admin[0]!);
      await (await redlock.acquire("unwatched/back", 10_000)).release();
    } finally {
      client.disconnect();
    }
  });

  it("the lock only watches a client's events: it adds no 'error' listener, and its listeners go when the client ends", async () => {
    const client = await connect(t.nodes[0]!);
    const emitter = client as unknown as NodeJS.EventEmitter;
    const before = emitter.eventNames().map((name) => [name, emitter.listenerCount(name)]);
    const errorListeners = emitter.listenerCount("error");
    const redlock = new Redlock([client, clients[1]!, clients[2]!], { retryCount: 0, nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS });
    await (await redlock.acquire("listeners", 10_000)).release();
    expect(emitter.listenerCount("error")).toBe(errorListeners);
    await client.quit();
    // The lock's listeners go once the client has ended, which follows quit()'s answer.
    await expect.poll(() => emitter.eventNames().map((name) => [name, emitter.listenerCount(name)]), { timeout: 5_000 }).toEqual(before);

    // Connected again, the client is watched again from the Redlock's next round: a kill is then known at once.
    await client.connect();
    await (await redlock.acquire("listeners", 10_000)).release();
    expect(emitter.listenerCount(errorMonitor)).toBe(1);
    await killAndWait(t, [client], [0]);
    const { error } = await acquireError(new Redlock([client], { retryCount: 0, nodeTimeoutMs: 5_000 }), "listeners");
    expect(error.nodes).toEqual([expect.objectContaining({ node: 0, reason: "refused", code: "ECONNREFUSED" })]);
    client.disconnect();
  });
});

describe("a call that fails names its error's code", () => {
  it("a system error: `error` with its code (ECONNRESET) and its message as detail", async () => {
    const reset = Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET", syscall: "read" });
    const failing = {
      evalsha: () => Promise.reject(reset),
      eval: () => Promise.reject(reset),
      script: () => Promise.reject(reset),
      ping: () => Promise.reject(reset),
    };
    const error = await new Redlock([failing], { retryCount: 0 }).acquire("reset", 1_000).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockNotAcquiredError);
    expect((error as LockNotAcquiredError).nodes).toEqual([{ node: 0, reason: "error", code: "ECONNRESET", detail: "read ECONNRESET" }]);
    expect((error as Error).message).toContain("node 0: error ECONNRESET (read ECONNRESET)");
  });
});

/** A node's client as ioredis presents one (status, events), answering per script as told, and recording what it is sent. */
class ScriptedClient extends EventEmitter {
  status = "ready";
  readonly sent: string[] = [];
  constructor(private readonly acquire: "grant" | "held" | "silent") {
    super();
    this.on("error", () => undefined); // the application's listener: ioredis emits connection errors only to one
  }
  evalsha(sha: string): Promise<unknown> {
    const name = Object.entries(SCRIPTS).find(([, s]) => s.sha === sha)?.[0] ?? sha;
    this.sent.push(name);
    if (name !== "acquire") return Promise.resolve(1);
    if (this.acquire === "silent") return new Promise(() => undefined);
    return Promise.resolve(this.acquire === "grant" ? [1, 1] : [0, 0]);
  }
  eval(): Promise<unknown> {
    return Promise.reject(new Error("not used"));
  }
  script(): Promise<unknown> {
    return Promise.resolve("sha");
  }
  ping(): Promise<unknown> {
    return Promise.resolve("PONG");
  }
  /** What ioredis does when a reconnect is refused: the status, then the error. */
  refuse(): void {
    this.status = "reconnecting";
    this.emit("error", Object.assign(new Error("connect ECONNREFUSED 10.0.0.3:6379"), { code: "ECONNREFUSED", syscall: "connect" }));
  }
}

describe("which nodes a failed attempt releases", () => {
  it("one seen down mid-round gets the RELEASE (queued behind its ACQUIRE, not waited for); one known down gets neither", async () => {
    const nodes = [new ScriptedClient("held"), new ScriptedClient("grant"), new ScriptedClient("silent")];
    const redlock = new Redlock(nodes, { retryCount: 0, nodeTimeoutMs: 5_000 });
    const pending = acquireError(redlock, "mid-round");
    await new Promise((r) => setTimeout(r, 20));
    nodes[2]!.refuse();
    const { error, ms } = await pending;
    expect(ms).toBeLessThan(1_000);
    expect(reasonOf(error, 2)).toEqual({ node: 2, reason: "refused", code: "ECONNREFUSED", detail: "connect ECONNREFUSED 10.0.0.3:6379" });
    expect(nodes.map((n) => n.sent)).toEqual([
      ["acquire", "release"],
      ["acquire", "release"],
      ["acquire", "release"],
    ]);

    await acquireError(redlock, "known-down");
    expect(nodes.map((n) => n.sent.length)).toEqual([4, 4, 2]);
    nodes[2]!.status = "ready";
    nodes[2]!.emit("connect");
    // Connected again: asked again (and, silent, released after the timeout).
    await acquireError(new Redlock(nodes, { retryCount: 0, nodeTimeoutMs: 50 }), "back");
    expect(nodes[2]!.sent).toEqual(["acquire", "release", "acquire", "release"]);
  });
});

describe("a connection error of several addresses (AggregateError)", () => {
  const refused = (address: string): Error =>
    Object.assign(new Error(`connect ECONNREFUSED ${address}:6379`), { code: "ECONNREFUSED", syscall: "connect" });

  it("is a node known down only if every address failed to connect", async () => {
    const node = new ScriptedClient("silent");
    const redlock = new Redlock([node], { retryCount: 0, nodeTimeoutMs: 50 });
    node.status = "reconnecting";
    // One entry is not a failure to connect (no syscall): what the connection failed with is unknown.
    const mixed = Object.assign(new AggregateError([refused("127.0.0.1"), new Error("something else")]), { code: "ECONNREFUSED" });
    node.emit("error", mixed);
    expect((await acquireError(redlock, "aggregate")).error.nodes).toEqual([{ node: 0, reason: "timeout" }]);

    const both = Object.assign(new AggregateError([refused("127.0.0.1"), refused("::1")]), { code: "ECONNREFUSED" });
    node.emit("error", both);
    const { error, ms } = await acquireError(new Redlock([node], { retryCount: 0, nodeTimeoutMs: 5_000 }), "aggregate");
    expect(error.nodes).toEqual([
      { node: 0, reason: "refused", code: "ECONNREFUSED", detail: "connect ECONNREFUSED 127.0.0.1:6379; connect ECONNREFUSED ::1:6379" },
    ]);
    expect(ms).toBeLessThan(1_000);
  });
});
