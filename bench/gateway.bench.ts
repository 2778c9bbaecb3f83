// HTTP gateway benchmark. The gateway runs as its own process, as deployed: the fenced-gateway bin,
// compiled (bench/run.ts runs `pnpm build` first) and run by plain node, so that it has its own event loop and
// its memory and CPU can be read from /proc without a TypeScript loader's share. JSON lines on stdout:
// - fenced Postgres writes through the gateway by 64 concurrent keep-alive clients, against the same
//   writes through FencedPostgres in this process (same server, same run, alternating rounds);
//   latency percentiles, the gateway's RSS under that load, its CPU time per write and its socket
//   reads and writes per request (system calls, /proc/<pid>/io), beside each anchor's;
// - the same writes by an ordinary API key presenting a signed fence credential instead of plain
//   fence headers (what the credential check costs per write), and the check alone in this process;
// - the same credential writes of a record whose key is its lease's resource (record cred-own/w under
//   resource cred-own/w, the store's one-row path once the resource is at the lease's fence) beside
//   those of a record under another resource (cred/w under cred-writer/w): writes/s and the gateway's
//   CPU time per write of each ("gateway-credential-own"), for information, no goal;
// - those credential writes against three anchors, each a process of its own like the gateway, in the
//   same interleaved rounds: an unfenced express 5 + pg service as run in production (pino-http,
//   prom-client, zod, an API-key check: anchor-express-prod.js), the lean express 5 + pg server
//   (anchor-express.js) and the same upsert behind bare node:http (anchor-node-http.js), the floor —
//   goals (ANCHOR_GOALS): CPU per write ≤ 1.15× the production service's and ≤ 1.5× the lean one's,
//   writes/s ≥ 0.85× the production service's, RSS under the load ≤ 1.5× the production service's;
// - a 512 MiB object PUT (known length, then chunked) and GET streamed through the gateway, with its RSS
//   (gateway-stream.ts).
// Every process (benchmark, gateway, anchors, PostgreSQL, radosgw) shares this machine's cores.
import { randomBytes } from "node:crypto";
import { availableParallelism, loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { Pool } from "undici";
import { credentialKeys, mintFenceCredential, verifyFenceCredential, type CredentialKey } from "@fenced/fence/credentials";
import { FencedPostgres } from "@fenced/store/postgres";
import { startPostgres, startS3 } from "@fenced/servers";
import { latencyBench, type OpenImpl } from "./gateway-latency.js";
import { streamLines } from "./gateway-stream.js";
import { emit, measure, median, round3, type Measured, type Op } from "./measure.js";
import { cpuQuotaSetting, nodeArgs, startServer, unitNodeFlags, type ServerProcess } from "./server-process.js";

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 3_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const CONCURRENCY = 64;
const STREAM_BYTES = Number(process.env.BENCH_STREAM_BYTES ?? 512 * 1024 * 1024);
const POOL_SIZE = 16;
const KEY = "bench-key-0123456789abcdef";
/** An ordinary client: it writes only with fence credentials. */
const SERVICE_KEY = "service-key-0123456789abcdef";
const FENCE_KEY: CredentialKey = { id: "bench", secret: randomBytes(32) };
/**
 * BENCH_GATEWAY_CLI: another build's cli.js to measure (e.g. a copy of an earlier dist), for before/after
 * runs. Only the gateway process changes: a copy inside packages/gateway loads the checkout's @fenced/*
 * packages, and the in-process lines (FencedPostgres, the credential check) measure the checkout's.
 */
const CLI = process.env.BENCH_GATEWAY_CLI ?? fileURLToPath(new URL("../packages/gateway/dist/cli.js", import.meta.url));
/**
 * The gateway's node flags: its systemd unit's (--max-semi-space-size), then any extra, e.g.
 * "--cpu-prof --cpu-prof-dir=/tmp/gw" to profile it under this load. The anchors run on node's defaults.
 */
const NODE_ARGS = [...unitNodeFlags(), ...nodeArgs("BENCH_GATEWAY_NODE_ARGS")];
/** Extra fenced-gateway flags, e.g. "--no-admission" to measure what admission control costs a write. */
const GATEWAY_FLAGS = nodeArgs("BENCH_GATEWAY_FLAGS");
/** The same for the anchor servers' processes. */
const ANCHOR_NODE_ARGS = nodeArgs("BENCH_ANCHOR_NODE_ARGS");
/**
 * Each server under test (gateway, anchors) in a CPU-quota cgroup of its own, half a core unless
 * BENCH_CPU_QUOTA says otherwise (0: uncapped): the load generator and PostgreSQL keep headroom on
 * the shared cores, so that writes/s is each server's own capacity, not the machine's. The quota holds
 * for the closed-loop rounds; the open-loop latency phases and the streams run uncapped.
 */
const CPU_QUOTA = cpuQuotaSetting(0.5);
/**
 * The machine's 1-minute load average as the bench starts, before any server of its own: other work
 * on the machine moves every server's CPU per write, the anchors' too, and with it every ratio.
 */
const LOAD_AT_START = round3(loadavg()[0] ?? Number.NaN);
const ANCHORS = {
  "express-prod-pg": fileURLToPath(new URL("anchor-express-prod.js", import.meta.url)),
  "express-pg": fileURLToPath(new URL("anchor-express.js", import.meta.url)),
  "node-http-pg": fileURLToPath(new URL("anchor-node-http.js", import.meta.url)),
} as const;
/**
 * Each anchor, what it is and the gateway's goals against it: against the production service, the
 * price of fencing (CPU and writes/s) and memory; against the lean one, fencing and being a production
 * server together; node:http, the floor, for information.
 */
const ANCHOR_GOALS = {
  "express-prod-pg": {
    anchorIs:
      "express 5 + pg, unfenced, as run in production: pino-http, a prom-client histogram, zod validation of the body, an API-key check on its SHA-256, the same upsert",
    opsMin: 0.85,
    cpuMax: 1.15,
    rssMax: 1.5,
  },
  "express-pg": {
    anchorIs:
      "express 5 + pg, unfenced and lean: express.json(), a bearer check, one INSERT … ON CONFLICT DO UPDATE … RETURNING version per PUT",
    cpuMax: 1.5,
  },
  "node-http-pg": { anchorIs: "the floor: the same bearer check and upsert behind bare node:http, no framework" },
} as const;

function startGateway(args: string[], env: Record<string, string>): Promise<ServerProcess> {
  return startServer(
    [...NODE_ARGS, CLI, "--port", "0", "--log-level", "info", ...GATEWAY_FLAGS, ...args],
    {
      FENCED_GATEWAY_API_KEYS: JSON.stringify([
        { id: "bench", key: KEY, resources: [""], keys: [""], trustedLockClient: true },
        { id: "service", key: SERVICE_KEY, resources: [""], keys: [""] },
      ]),
      FENCED_GATEWAY_FENCE_KEYS: JSON.stringify([{ id: FENCE_KEY.id, secret: Buffer.from(FENCE_KEY.secret).toString("base64") }]),
      ...env,
    },
    CPU_QUOTA,
  );
}

/** An anchor server (plain node, no loader), on the same PostgreSQL and pool size, with a table of its own. */
function startAnchor(anchor: keyof typeof ANCHORS, postgresUrl: string): Promise<ServerProcess> {
  return startServer(
    [...ANCHOR_NODE_ARGS, ANCHORS[anchor]],
    {
      ANCHOR_POSTGRES_URL: postgresUrl,
      ANCHOR_POOL_SIZE: String(POOL_SIZE),
      ANCHOR_API_KEY: SERVICE_KEY,
      ANCHOR_TABLE: `bench_anchor_${anchor.replaceAll("-", "_")}`,
    },
    CPU_QUOTA,
  );
}

const value = (w: number, i: number): string => JSON.stringify({ writer: w, seq: i, note: "invoice total updated" });

const postgres = await startPostgres();
const s3 = await startS3();
const pool = new pg.Pool({ connectionString: postgres.url, max: POOL_SIZE });
let gateway: ServerProcess | undefined;
const anchorProcesses: ServerProcess[] = [];
try {
  const bucket = await s3.createBucket();
  const startBenchGateway = (): Promise<ServerProcess> =>
    startGateway(
      [
        "--postgres",
        postgres.url,
        "--postgres-schema",
        "bench_gateway",
        "--postgres-pool-size",
        String(POOL_SIZE),
        "--s3-endpoint",
        s3.endpoint,
        "--s3-bucket",
        bucket,
        "--s3-region",
        s3.region,
      ],
      {
        FENCED_GATEWAY_S3_ACCESS_KEY_ID: s3.accessKeyId,
        FENCED_GATEWAY_S3_SECRET_ACCESS_KEY: s3.secretAccessKey,
      },
    );
  gateway = await startBenchGateway();
  const gw = gateway;
  const anchors = {
    "express-prod-pg": await startAnchor("express-prod-pg", postgres.url),
    "express-pg": await startAnchor("express-pg", postgres.url),
    "node-http-pg": await startAnchor("node-http-pg", postgres.url),
  };
  anchorProcesses.push(...Object.values(anchors));
  const library = new FencedPostgres(pool, { schema: "bench_library" });
  await library.migrate();
  const setting = {
    server: "throwaway (fsync=off, synchronous_commit=off)",
    source: postgres.source,
    rows: "per-worker",
    concurrency: CONCURRENCY,
    cores: availableParallelism(),
    serverCpuQuota: CPU_QUOTA === 0 ? "uncapped" : `${CPU_QUOTA} core each (cgroup ${gw.quota?.version ?? "?"})`,
    loadAverageAtStart: LOAD_AT_START,
  };

  // 64 keep-alive connections, one per client; undici costs this process less CPU per request than
  // node:http's client, and every microsecond the load generator spends is taken from the gateway.
  const clients = new Pool(`http://127.0.0.1:${gw.port}`, { connections: CONCURRENCY, pipelining: 1 });
  // Worker w writes row w under resource w, as a client holding one lease per row would: record
  // cred/w under resource cred-writer/w, or (`own`) the record named as its lease's resource, cred-own/w.
  const mint = (resource: string, w: number): string =>
    mintFenceCredential({ resource, token: 1n, holder: `bench-${w}` }, FENCE_KEY, { expiresAt: Date.now() + 86_400_000 });
  const credentials = Array.from({ length: CONCURRENCY }, (_, w) => mint(`cred-writer/${w}`, w));
  const ownCredentials = Array.from({ length: CONCURRENCY }, (_, w) => mint(`cred-own/${w}`, w));
  const credentialPut =
    (to: Pool, what: string, own = false): Op =>
    async (w, i) => {
      const res = await to.request({
        method: "PUT",
        path: own ? `/v1/records/cred-own/${w}` : `/v1/records/cred/${w}`,
        headers: {
          authorization: `Bearer ${SERVICE_KEY}`,
          "fencing-credential": (own ? ownCredentials : credentials)[w] as string,
          "content-type": "application/json",
        },
        body: value(w, i),
      });
      await res.body.dump();
      if (res.statusCode !== 200) throw new Error(`${what} answered ${res.statusCode}`);
    };
  // The anchors take the same requests (an anchor ignores the credential, as an unfenced server would).
  const anchorClients = {
    "express-prod-pg": new Pool(`http://127.0.0.1:${anchors["express-prod-pg"].port}`, { connections: CONCURRENCY, pipelining: 1 }),
    "express-pg": new Pool(`http://127.0.0.1:${anchors["express-pg"].port}`, { connections: CONCURRENCY, pipelining: 1 }),
    "node-http-pg": new Pool(`http://127.0.0.1:${anchors["node-http-pg"].port}`, { connections: CONCURRENCY, pipelining: 1 }),
  };
  const impls: Record<"gateway" | "gateway-credential" | "gateway-credential-own" | "library" | keyof typeof ANCHORS, Op> = {
    gateway: async (w, i) => {
      const res = await clients.request({
        method: "PUT",
        path: `/v1/records/row/${w}`,
        headers: {
          authorization: `Bearer ${KEY}`,
          "fencing-token": "1",
          "fencing-resource": `writer/${w}`,
          "content-type": "application/json",
        },
        body: value(w, i),
      });
      await res.body.dump();
      if (res.statusCode !== 200) throw new Error(`gateway answered ${res.statusCode}`);
    },
    "gateway-credential": credentialPut(clients, "gateway"),
    "gateway-credential-own": credentialPut(clients, "gateway", true),
    library: async (w, i) => {
      await library.put(`row/${w}`, JSON.parse(value(w, i)) as Record<string, unknown>, { fence: { resource: `writer/${w}`, token: 1n } });
    },
    "express-prod-pg": credentialPut(anchorClients["express-prod-pg"], "express-prod-pg anchor"),
    "express-pg": credentialPut(anchorClients["express-pg"], "express-pg anchor"),
    "node-http-pg": credentialPut(anchorClients["node-http-pg"], "node-http-pg anchor"),
  };
  type Impl = keyof typeof impls;
  /** The server process each HTTP line is read from (the library runs in this one). */
  const processOf: Partial<Record<Impl, ServerProcess>> = {
    gateway: gw,
    "gateway-credential": gw,
    "gateway-credential-own": gw,
    "express-prod-pg": anchors["express-prod-pg"],
    "express-pg": anchors["express-pg"],
    "node-http-pg": anchors["node-http-pg"],
  };

  // A fresh server process needs a few thousand requests before V8 has optimised its hot paths
  // and grown its young generation; until then it runs at about half speed. Steady state is the goal.
  for (const impl of ["gateway", "gateway-credential", "gateway-credential-own", "express-prod-pg", "express-pg", "node-http-pg"] as const)
    await measure(impls[impl], CONCURRENCY, 3_000);
  const rounds: Record<
    Impl,
    (Measured & { cpuUsPerWrite?: number; peakRssMb?: number; writesPerRequest?: number; readsPerRequest?: number })[]
  > = {
    gateway: [],
    "gateway-credential": [],
    "gateway-credential-own": [],
    library: [],
    "express-prod-pg": [],
    "express-pg": [],
    "node-http-pg": [],
  };
  const peakRss: Partial<Record<Impl, number>> = {};
  for (let round = 0; round < ROUNDS; round++) {
    for (const impl of [
      "gateway",
      "gateway-credential",
      "gateway-credential-own",
      "express-prod-pg",
      "express-pg",
      "node-http-pg",
      "library",
    ] as const) {
      await measure(impls[impl], CONCURRENCY, 500); // warm-up: connections, prepared statements, JIT
      const server = processOf[impl];
      if (server === undefined) {
        const r = await measure(impls[impl], CONCURRENCY, DURATION_MS);
        emit({ bench: "gateway-postgres-put", impl, ...setting, round, ...r });
        rounds[impl].push(r);
        continue;
      }
      server.resetPeak();
      const cpu0 = server.cpuSeconds();
      const io0 = server.syscalls();
      const r = await measure(impls[impl], CONCURRENCY, DURATION_MS);
      const io1 = server.syscalls();
      const rss = server.rssMb();
      peakRss[impl] = Math.max(peakRss[impl] ?? 0, rss.peak);
      const cpuUsPerWrite = Math.round(((server.cpuSeconds() - cpu0) * 1e6) / r.ops);
      const writesPerRequest = round3((io1.writes - io0.writes) / r.ops);
      const readsPerRequest = round3((io1.reads - io0.reads) / r.ops);
      emit({
        bench: "gateway-postgres-put",
        impl,
        ...setting,
        round,
        ...r,
        serverRssMb: rss.now,
        serverPeakRssMb: rss.peak,
        serverCpuUsPerWrite: cpuUsPerWrite,
        serverWritesPerRequest: writesPerRequest,
        serverReadsPerRequest: readsPerRequest,
      });
      rounds[impl].push({ ...r, cpuUsPerWrite, peakRssMb: rss.peak, writesPerRequest, readsPerRequest });
    }
  }
  const med = (impl: Impl, field: "opsPerSec" | "p50Ms" | "p99Ms" | "cpuUsPerWrite" | "writesPerRequest" | "readsPerRequest"): number =>
    median(rounds[impl].map((r) => r[field] ?? Number.NaN));
  // The check alone, in this process: what verifying one credential costs the gateway's CPU.
  const keys = credentialKeys([FENCE_KEY]);
  const VERIFIES = 100_000;
  const v0 = performance.now();
  for (let i = 0; i < VERIFIES; i++) verifyFenceCredential(credentials[i % CONCURRENCY], keys);
  emit({
    bench: "gateway-credential-check",
    ...setting,
    ratio: round3(med("gateway-credential", "opsPerSec") / med("gateway", "opsPerSec")),
    ratioOf: `credential writes/s ÷ plain-header writes/s through the gateway (median of ${ROUNDS} rounds): what verifying a credential costs per write`,
    credentialOpsPerSec: med("gateway-credential", "opsPerSec"),
    credentialCpuUsPerWrite: med("gateway-credential", "cpuUsPerWrite"),
    plainOpsPerSec: med("gateway", "opsPerSec"),
    plainCpuUsPerWrite: med("gateway", "cpuUsPerWrite"),
    verifyUsEach: round3(((performance.now() - v0) * 1000) / VERIFIES),
  });
  // A record named as its lease's resource against one under another resource, both credential writes.
  emit({
    bench: "gateway-credential-own",
    ...setting,
    ratio: round3(med("gateway-credential-own", "opsPerSec") / med("gateway-credential", "opsPerSec")),
    ratioOf: `credential writes/s of record cred-own/w under resource cred-own/w (its own) ÷ of record cred/w under resource cred-writer/w, through the gateway (median of ${ROUNDS} interleaved rounds)`,
    note: "for information, no goal",
    ownOpsPerSec: med("gateway-credential-own", "opsPerSec"),
    ownCpuUsPerWrite: med("gateway-credential-own", "cpuUsPerWrite"),
    otherOpsPerSec: med("gateway-credential", "opsPerSec"),
    otherCpuUsPerWrite: med("gateway-credential", "cpuUsPerWrite"),
    cpuRatio: round3(med("gateway-credential-own", "cpuUsPerWrite") / med("gateway-credential", "cpuUsPerWrite")),
  });
  const ratio = round3(med("gateway", "opsPerSec") / med("library", "opsPerSec"));
  emit({
    bench: "gateway-postgres-put",
    ...setting,
    ratio,
    ratioOf: `gateway writes/s ÷ the same writes made with FencedPostgres in this process (median of ${ROUNDS} interleaved rounds, ${CONCURRENCY} keep-alive clients)`,
    // HTTP against no HTTP: for information. The gateway is judged against the servers a user would
    // write without fencing (the gateway-anchor lines below).
    note: "for information, no goal",
    gatewayOpsPerSec: med("gateway", "opsPerSec"),
    libraryOpsPerSec: med("library", "opsPerSec"),
    gatewayCpuUsPerWrite: med("gateway", "cpuUsPerWrite"),
    gatewayPeakRssMb: peakRss.gateway,
    // In a closed loop every client waits for its answer before sending again, so the latency is
    // the queue: by Little's law p50 ≈ clients ÷ throughput. The open-loop line below is the latency goal.
    closedLoopP50Ms: med("gateway", "p50Ms"),
    closedLoopP99Ms: med("gateway", "p99Ms"),
  });
  // Fenced credential writes through the gateway against the servers a user would compare it with:
  // its CPU per write (the quota holds each server to half a core, so CPU is what a write costs),
  // writes/s and RSS under the load, each with its goal where it has one.
  for (const anchor of ["express-prod-pg", "express-pg", "node-http-pg"] as const) {
    const goals = ANCHOR_GOALS[anchor];
    const opsRatio = round3(med("gateway-credential", "opsPerSec") / med(anchor, "opsPerSec"));
    const cpuRatio = round3(med("gateway-credential", "cpuUsPerWrite") / med(anchor, "cpuUsPerWrite"));
    const rssRatio = round3((peakRss["gateway-credential"] ?? Number.NaN) / (peakRss[anchor] ?? Number.NaN));
    emit({
      bench: "gateway-anchor",
      anchor,
      ...setting,
      anchorIs: goals.anchorIs,
      ratio: opsRatio,
      ratioOf: `gateway credential writes/s ÷ ${anchor} writes/s (median of ${ROUNDS} interleaved rounds, ${CONCURRENCY} keep-alive clients, pool of ${POOL_SIZE})`,
      ...("opsMin" in goals ? { goal: `>= ${goals.opsMin}`, met: opsRatio >= goals.opsMin } : { note: "writes/s for information" }),
      gatewayOpsPerSec: med("gateway-credential", "opsPerSec"),
      anchorOpsPerSec: med(anchor, "opsPerSec"),
      cpuRatio,
      ...("cpuMax" in goals ? { cpuGoal: `<= ${goals.cpuMax}`, cpuMet: cpuRatio <= goals.cpuMax } : {}),
      gatewayCpuUsPerWrite: med("gateway-credential", "cpuUsPerWrite"),
      anchorCpuUsPerWrite: med(anchor, "cpuUsPerWrite"),
      rssRatio,
      ...("rssMax" in goals ? { rssGoal: `<= ${goals.rssMax}`, rssMet: rssRatio <= goals.rssMax } : {}),
      gatewayPeakRssMb: peakRss["gateway-credential"],
      anchorPeakRssMb: peakRss[anchor],
      // Socket reads and writes per request, client and database sides together (/proc/<pid>/io).
      gatewayWritesPerRequest: med("gateway-credential", "writesPerRequest"),
      anchorWritesPerRequest: med(anchor, "writesPerRequest"),
      gatewayReadsPerRequest: med("gateway-credential", "readsPerRequest"),
      anchorReadsPerRequest: med(anchor, "readsPerRequest"),
    });
  }

  // Latency as a client sees it when the server is not the bottleneck (gateway-latency.ts). Uncapped
  // from here on, the streams too: a quota's throttling stalls a process for up to half a period
  // (50 ms), which would be the p99 of every side, not its own.
  for (const server of [gw, ...anchorProcesses]) server.quota?.uncap();
  await latencyBench({
    impls,
    processOf: processOf as Record<OpenImpl, ServerProcess>,
    plainOpsPerSec: med("gateway", "opsPerSec"),
    credentialOpsPerSec: med("gateway-credential", "opsPerSec"),
    durationMs: DURATION_MS * 2,
    setting,
  });
  await Promise.all(Object.values(anchorClients).map((c) => c.close()));
  await clients.close();

  // 512 MiB through the gateway (gateway-stream.ts). BENCH_STREAM_BYTES=0 leaves the streams out. Each
  // stream goes through the gateway that served the writes above (its heap as that load left it: young
  // generation grown, old space not yet collected) and through a fresh one, whose figures are the stream's own.
  const fresh = STREAM_BYTES > 0 ? await startBenchGateway() : undefined;
  if (fresh !== undefined) {
    anchorProcesses.push(fresh);
    fresh.quota?.uncap();
    await streamLines(
      [
        ["after-writes", gateway],
        ["fresh", fresh],
      ],
      KEY,
      STREAM_BYTES,
    );
  }
} finally {
  await gateway?.stop();
  await Promise.all(anchorProcesses.map((a) => a.stop()));
  await pool.end();
  await Promise.allSettled([s3.stop(), postgres.stop()]);
}
