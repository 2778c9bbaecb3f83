import { performance } from "node:perf_hooks";
import { once } from "node:events";
import { ANSWERING_NODE_TIMEOUT_MS } from "@fenced/servers";
import { Redis } from "ioredis";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GATEWAY_VERSION } from "./version.js";
import { createGateway } from "./index.js";
import { SCRAPE_PROBE_MAX_MS } from "./routes/leases.js";
import { serve, type Serving } from "./http/server.js";
import {
  bearer,
  httpClient,
  KEYS,
  runGateway,
  startBackends,
  writeHeaders,
  type Backends,
  type HttpClient,
  type RunningGateway,
} from "./test-support.js";

/**
 * /metrics against real backends: the gateway's version, the outcome of every store call, and each
 * lock node's state, latency and failures by kind (refused, timeout), labelled by index and, on the
 * admin listener only, by address.
 */
let backends: Backends;
let gw: RunningGateway;
/** The admin listener (/healthz and /metrics on a port of their own): where node addresses may show. */
let admin: Serving;
let adminClient: HttpClient;
/** The lock's clients: node 2's URL carries a password, which no label may show. */
let clients: Redis[];
const PASSWORD = "n0t-in-any-label";
/**
 * Far above any answer: the nodes that are up must not count a timeout (the first test finds none, and
 * every node up), which a busy machine could make one of them do with a few hundred milliseconds.
 */
const NODE_TIMEOUT_MS = ANSWERING_NODE_TIMEOUT_MS;
/** A scrape with a paused node: its probe's deadline, and the rest of the scrape on a busy machine (well under a second). */
const SCRAPE_MARGIN_MS = 3_000;
/** Scrapes sent at once, each on a connection of its own. */
const SCRAPES = 50;

beforeAll(async () => {
  backends = await startBackends({ redis: 3, redisFaults: true, postgres: true });
  const urls = backends.redis?.urls ?? [];
  clients = urls.map((url, i) => {
    const withPassword = new URL(url);
    withPassword.password = PASSWORD;
    // The test servers ask for no password: ioredis then only warns that AUTH was not needed.
    const client = new Redis(i === 2 ? withPassword.toString() : url);
    client.on("error", () => undefined);
    return client;
  });
  gw = await runGateway(
    backends.gatewayOptions({
      leases: { clients, redlock: { nodeTimeoutMs: NODE_TIMEOUT_MS }, acquireTimeoutMs: 3 * NODE_TIMEOUT_MS },
      separateAdmin: true,
    }),
  );
  admin = await serve(gw.gateway.admin, { port: 0 });
  adminClient = httpClient(admin.port);
});
afterAll(async () => {
  adminClient?.close();
  await admin?.drain(1_000);
  await gw?.close();
  for (const c of clients ?? []) c.disconnect();
  await backends?.stop();
});

async function scrape(): Promise<string> {
  const res = await adminClient.send({ method: "GET", path: "/metrics" });
  expect(res.status).toBe(200);
  return res.text();
}

/** The value of one series, or undefined. Labels as Prometheus writes them, in their declared order. */
function series(text: string, name: string, labels: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{${labels}} `));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(" ") + 1));
}

const nodeLabels = (node: number): string => {
  const { hostname, port } = new URL(backends.redis?.urls[node] ?? "");
  return `node="${node}",address="${hostname}:${port}"`;
};

/** A lease taken and released; its status (201, or 503 without a quorum). */
async function leaseOnce(resource: string): Promise<number> {
  const granted = await gw.client.json("POST", "/v1/leases", { resource, ttlMs: 5_000 }, bearer(KEYS.admin));
  if (granted.status === 201) {
    const { leaseId } = granted.json<{ leaseId: string }>();
    expect((await gw.client.json("POST", "/v1/leases/release", { leaseId }, bearer(KEYS.admin))).status).toBe(204);
  }
  return granted.status;
}

describe("/metrics", () => {
  it("fenced_gateway_build_info carries the package's version", async () => {
    expect(series(await scrape(), "fenced_gateway_build_info", `version="${GATEWAY_VERSION}"`)).toBe(1);
  });

  it("store calls are timed by outcome: ok, or the problem their error is answered with", async () => {
    const json = { "content-type": "application/json" };
    const put = (token: bigint) =>
      gw.client.send({ method: "PUT", path: "/v1/records/o/a", headers: { ...writeHeaders(KEYS.admin, token), ...json }, body: "1" });
    expect((await put(5n)).status).toBe(200);
    expect((await put(4n)).status).toBe(409);
    const text = await scrape();
    expect(series(text, "fenced_gateway_store_duration_seconds_count", 'store="records",op="put",outcome="ok"')).toBe(1);
    expect(series(text, "fenced_gateway_store_duration_seconds_count", 'store="records",op="put",outcome="stale_token"')).toBe(1);
    expect(series(text, "fenced_gateway_store_duration_seconds_count", 'store="leases",op="acquire",outcome="ok"')).toBeUndefined();
  });

  it("the records store's PostgreSQL pool: connections busy and idle, and calls waiting for one", async () => {
    const pool = backends.pool as NonNullable<Backends["pool"]>;
    // Every connection the pool may open, held here: one more call waits for one of them.
    const held = await Promise.all(Array.from({ length: pool.options.max }, () => pool.connect()));
    const waiter = pool.connect();
    try {
      const text = await scrape();
      expect(series(text, "fenced_gateway_postgres_pool", 'state="busy"')).toBe(pool.options.max);
      expect(series(text, "fenced_gateway_postgres_pool", 'state="idle"')).toBe(0);
      expect(series(text, "fenced_gateway_postgres_pool", 'state="waiting"')).toBe(1);
    } finally {
      for (const client of held) client.release();
      (await waiter).release();
    }
    const after = await scrape();
    expect(series(after, "fenced_gateway_postgres_pool", 'state="busy"')).toBe(0);
    expect(series(after, "fenced_gateway_postgres_pool", 'state="idle"')).toBe(pool.options.max);
    expect(series(after, "fenced_gateway_postgres_pool", 'state="waiting"')).toBe(0);
  });

  it("a pool-like object of the user's without pg's counts: the gateway is created, and /metrics shows no pool", async () => {
    const poolLike = { query: () => Promise.resolve({ rows: [] }), connect: () => Promise.reject(new Error("unused")) };
    // No leases, and the pool-like object for its records: this gateway holds no lock client or PostgreSQL pool the file's other tests use.
    const { leases: _leases, ...options } = backends.gatewayOptions({ records: { pool: poolLike as never } });
    const other = createGateway(options);
    try {
      const text = await other.metrics.registry.metrics();
      expect(text).toContain("fenced_gateway_build_info");
      expect(text).not.toMatch(/^fenced_gateway_postgres_pool\{/m);
    } finally {
      other.close();
    }
  });

  it("each lock node: up, its answers' latency, its failures by kind; labelled by index and host:port, never a password", async () => {
    const before = await scrape();
    for (const node of [0, 1, 2])
      for (const kind of ["refused", "timeout", "error"])
        expect(series(before, "fenced_gateway_lock_node_failures_total", `${nodeLabels(node)},kind="${kind}"`)).toBe(0);

    expect(await leaseOnce("nodes/up")).toBe(201);
    // A release answers once a quorum did: the last node's answer may come a moment later.
    const answered = async (): Promise<number> => {
      const text = await scrape();
      return Math.min(...[0, 1, 2].map((node) => series(text, "fenced_gateway_lock_node_duration_seconds_count", nodeLabels(node)) ?? 0));
    };
    await expect.poll(answered, { timeout: 5_000 }).toBeGreaterThanOrEqual(2);
    const text = await scrape();
    for (const node of [0, 1, 2]) {
      expect(series(text, "fenced_gateway_lock_node_up", nodeLabels(node))).toBe(1);
      expect(series(text, "fenced_gateway_lock_node_duration_seconds_count", nodeLabels(node))).toBeGreaterThanOrEqual(2);
    }
    expect(series(text, "fenced_gateway_store_duration_seconds_count", 'store="leases",op="acquire",outcome="ok"')).toBe(1);
    expect(text).not.toContain(PASSWORD);
  });

  it("a paused node counts a timeout nodeTimeoutMs after the round began; a stopped one, refused", async () => {
    const nodes = backends.redis?.nodes ?? [];
    nodes[1]?.pause();
    try {
      // Nodes 0 and 2 grant: the lease does not wait for node 1, whose timeout is counted when nodeTimeoutMs has passed.
      expect(await leaseOnce("nodes/paused")).toBe(201);
      await expect
        .poll(async () => series(await scrape(), "fenced_gateway_lock_node_failures_total", `${nodeLabels(1)},kind="timeout"`), {
          timeout: 5_000,
        })
        .toBeGreaterThanOrEqual(1);
      expect(series(await scrape(), "fenced_gateway_lock_node_up", nodeLabels(1))).toBe(0);
    } finally {
      nodes[1]?.resume();
    }

    // Stopped: once its client has had a reconnection refused, the lock knows it down and counts it refused at once.
    const refused = new Promise<void>((resolve) => {
      const onError = (err: { code?: unknown }): void => {
        if (err.code !== "ECONNREFUSED") return;
        clients[0]?.removeListener("error", onError);
        resolve();
      };
      clients[0]?.on("error", onError);
    });
    await nodes[0]?.kill();
    await refused;
    // Nodes 1 (resumed) and 2 grant.
    expect(await leaseOnce("nodes/stopped")).toBe(201);
    const text = await scrape();
    expect(series(text, "fenced_gateway_lock_node_failures_total", `${nodeLabels(0)},kind="refused"`)).toBeGreaterThanOrEqual(1);
    expect(series(text, "fenced_gateway_lock_node_up", nodeLabels(0))).toBe(0);
    await nodes[0]?.restart();
    if (clients[0]?.status !== "ready") await once(clients[0] as Redis, "ready");
    expect(await leaseOnce("nodes/back")).toBe(201);
    // Back, it is sent the calls again; its answers may come after the quorum's.
    await expect.poll(async () => series(await scrape(), "fenced_gateway_lock_node_up", nodeLabels(0)), { timeout: 5_000 }).toBe(1);
  });
  it("each node's state with no lease and no /readyz: each scrape PINGs every node first, and shows one killed, and one paused, at once; a lease script's answer sets it too; a warn line on each change", async () => {
    const logged: Record<string, unknown>[] = [];
    const logger = pino({ level: "info" }, { write: (line: string) => void logged.push(JSON.parse(line) as Record<string, unknown>) });
    const own = (backends.redis?.urls ?? []).map((url) => new Redis(url).on("error", () => undefined));
    const fresh = await runGateway(
      backends.gatewayOptions({
        logger,
        leases: { clients: own, redlock: { nodeTimeoutMs: NODE_TIMEOUT_MS }, acquireTimeoutMs: 3 * NODE_TIMEOUT_MS },
      }),
    );
    // A scrape, as Prometheus makes one (the shipped unit calls nothing else): each node's gauge.
    const scrape = async (): Promise<(number | undefined)[]> => {
      const text = await fresh.gateway.metrics.registry.metrics();
      return [0, 1, 2].map((node) => series(text, "fenced_gateway_lock_node_up", `node="${node}",address=""`));
    };
    const changes = (): unknown[][] =>
      logged.filter((l) => l.msg === "lock node down" || l.msg === "lock node answers again").map((l) => [l.msg, l.node, l.state]);
    const node2 = backends.redis?.nodes[2];
    try {
      // The first scrape: every node's state, from its own probe.
      expect(await scrape()).toEqual([1, 1, 1]);
      expect(changes()).toEqual([]);

      // Killed: the first scrape after it shows it down (its connection refused, or silent for one node timeout).
      await node2?.kill();
      expect(await scrape()).toEqual([1, 1, 0]);
      expect(changes()).toEqual([["lock node down", 2, expect.stringMatching(/^(refused|timeout)$/)]]);
      // Back: a scrape shows it up once its client has reconnected.
      await node2?.restart();
      await expect.poll(scrape, { timeout: 20_000 }).toEqual([1, 1, 1]);

      // Paused (SIGSTOP): its connection is up and it answers nothing. The first scrape after shows it
      // down, within one node timeout, and the node that answers nothing does not hold the scrape longer.
      node2?.pause();
      try {
        const started = performance.now();
        expect(await scrape()).toEqual([1, 1, 0]);
        expect(performance.now() - started).toBeLessThan(NODE_TIMEOUT_MS + SCRAPE_MARGIN_MS);
      } finally {
        node2?.resume();
      }
      await expect.poll(scrape, { timeout: 20_000 }).toEqual([1, 1, 1]);
      expect(changes().map(([msg, node]) => [msg, node])).toEqual([
        ["lock node down", 2],
        ["lock node answers again", 2],
        ["lock node down", 2],
        ["lock node answers again", 2],
      ]);
      // All of it without a lease: no lock call was made.
      const text = await fresh.gateway.metrics.registry.metrics();
      for (const node of [0, 1, 2])
        expect(series(text, "fenced_gateway_lock_node_duration_seconds_count", `node="${node}",address=""`) ?? 0).toBe(0);

      // A lease script's answer sets the state too, with no scrape: node 2 paused, a lease granted by
      // the other two, and node 2's timeout, reported a node timeout after the round began, says so.
      node2?.pause();
      const lease = await fresh.client.json("POST", "/v1/leases", { resource: "nodes/scrape-less", ttlMs: 60_000 }, bearer(KEYS.admin));
      expect(lease.status).toBe(201);
      await expect.poll(() => changes().length, { timeout: 3 * NODE_TIMEOUT_MS }).toBe(5);
      expect(changes()[4]).toEqual(["lock node down", 2, "timeout"]);
    } finally {
      if (node2?.paused === true) node2.resume();
      await fresh.close();
      for (const c of own) c.disconnect();
    }
  }, 60_000);

  it(
    "a node timeout longer than a scrape may take: the scrape's probe waits SCRAPE_PROBE_MAX_MS, not the node timeout, and shows the paused node down",
    async () => {
      // Prometheus gives a scrape 10 s by default: a probe that waited out a 20 s node timeout would fail it.
      const nodeTimeoutMs = 4 * SCRAPE_PROBE_MAX_MS;
      const own = (backends.redis?.urls ?? []).map((url) => new Redis(url).on("error", () => undefined));
      const slow = await runGateway(
        backends.gatewayOptions({ leases: { clients: own, redlock: { nodeTimeoutMs }, acquireTimeoutMs: 3 * nodeTimeoutMs } }),
      );
      const node2 = backends.redis?.nodes[2];
      node2?.pause();
      try {
        const started = performance.now();
        const text = await slow.gateway.metrics.registry.metrics();
        const ms = performance.now() - started;
        expect(series(text, "fenced_gateway_lock_node_up", `node="2",address=""`)).toBe(0);
        expect(ms).toBeGreaterThanOrEqual(SCRAPE_PROBE_MAX_MS - 1);
        expect(ms).toBeLessThan(SCRAPE_PROBE_MAX_MS + SCRAPE_MARGIN_MS);
      } finally {
        node2?.resume();
        await slow.close();
        for (const c of own) c.disconnect();
      }
    },
    4 * SCRAPE_PROBE_MAX_MS,
  );

  it("while a node is silent, scrapes share one probe at a time: a flood of /metrics sends each node a PING per node timeout, not one per scrape", async () => {
    const pings = async (): Promise<number[]> =>
      Promise.all(clients.map(async (c) => Number(/cmdstat_ping:calls=(\d+)/.exec(await c.info("commandstats"))?.[1] ?? 0)));
    const before = await pings();
    const node2 = backends.redis?.nodes[2];
    node2?.pause();
    try {
      // Each scrape waits up to the node timeout for the silent node: they overlap, as a flood does.
      const answers = await Promise.all(Array.from({ length: SCRAPES }, () => adminClient.send({ method: "GET", path: "/metrics" })));
      expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    } finally {
      node2?.resume();
    }
    const after = await pings();
    // One probe per scrape would be SCRAPES PINGs per node; one at a time, a probe per node timeout or so.
    for (const [node, n] of after.entries()) expect(n - (before[node] ?? 0), `node ${node}`).toBeLessThanOrEqual(SCRAPES / 10);
  });

  it("served on the public listener (no admin listener), names each node by index only: no address, no port", async () => {
    const open = await runGateway(backends.gatewayOptions({ leases: { clients } }));
    try {
      const res = await open.client.send({ method: "GET", path: "/metrics" });
      const text = res.text();
      for (const node of [0, 1, 2]) {
        expect(series(text, "fenced_gateway_lock_node_failures_total", `node="${node}",address="",kind="refused"`)).toBe(0);
        expect(text).not.toContain(`:${new URL(backends.redis?.urls[node] ?? "").port}`);
      }
    } finally {
      await open.close();
    }
  });
});
