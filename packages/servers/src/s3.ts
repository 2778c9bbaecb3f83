import { execFile } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { rmSync } from "node:fs";
import { Agent } from "node:http";
import { Agent as HttpsAgent } from "node:https";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { CreateBucketCommand, DeleteBucketCommand, DeleteObjectsCommand, ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";
import { CLOCK_OFFSET_FILE_ENV, compileClockShim, writeClockOffset } from "./clock-shim.js";
import { dockerAvailable } from "./docker.js";
import { freePort } from "./ports.js";
import type { ServerFaults } from "./faults.js";
import { continueTree, killHard, requireExecutable, spawnTracked, stopTree, waitFor, type Spawned } from "./processes.js";

export interface StartedS3 {
  readonly endpoint: string;
  readonly region: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  /** Always path-style: neither radosgw on loopback nor MinIO has wildcard DNS for virtual-host buckets. */
  readonly forcePathStyle: true;
  /** env: S3_ENDPOINT as given; docker: a MinIO container; local: a one-host Ceph cluster with radosgw. */
  readonly source: "env" | "docker" | "local";
  /**
   * A new client for this server (each call: tests may attach their own middleware). `maxSockets`:
   * at most that many connections at once (default: the SDK's), so that a test can exhaust them.
   */
  client(options?: { readonly maxSockets?: number }): S3Client;
  /** Creates a bucket (a fresh unique name unless given) and returns its name. */
  createBucket(name?: string): Promise<string>;
  /** Stops the server and removes its files; idempotent. With S3_ENDPOINT, deletes only the buckets createBucket made. */
  stop(): Promise<void>;
  /** Present when started with `{ faults: true }`: pause, resume, kill and restart radosgw. */
  readonly faults?: ServerFaults;
  /**
   * Present when started with `{ faults: true, clock: true }`: moves radosgw's wall clock (its `Date`
   * headers, the signature dates it accepts, objects' LastModified) by `ms` from the machine's; a
   * restart keeps the offset. The mon and the OSD keep the machine's clock.
   */
  readonly clock?: { setOffsetMs(ms: number): void };
}

export interface StartS3Options {
  /**
   * Start a local Ceph cluster this process owns — never S3_ENDPOINT or a container, even when they
   * are available — and hand back its `faults`, acting on its radosgw (the cluster's mon and OSD,
   * which hold the data, are left alone), so that a fault test never skips its fault. Default false.
   */
  readonly faults?: boolean;
  /** With `faults`: radosgw runs under the clock shim (clock-shim.ts), its clock moved by `clock.setOffsetMs`. Needs gcc. */
  readonly clock?: boolean;
}

/** What to install when a Ceph binary is missing. */
export const S3_INSTALL_HINT = "apt-get install --no-install-recommends radosgw ceph-mon ceph-osd";

const LOOPBACK = "127.0.0.1";
const START_TIMEOUT_MS = 30_000;
// memstore keeps every object in the OSD's RAM and refuses writes beyond this many bytes. It is a
// limit, not an allocation: 4 GiB leaves room for the 512 MiB streaming benchmark and its multipart parts.
const MEMSTORE_BYTES = 4 * 1024 ** 3;

/**
 * A real S3 server for tests and benchmarks, in this order:
 * - S3_ENDPOINT (with S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY, and optionally S3_REGION, default us-east-1);
 * - a MinIO container when a Docker engine answers;
 * - else a private one-host Ceph cluster (ceph-mon, one memstore ceph-osd, radosgw) on free loopback ports.
 */
export async function startS3(
  options: StartS3Options & { readonly faults: true; readonly clock: true },
): Promise<StartedS3 & { readonly faults: ServerFaults; readonly clock: NonNullable<StartedS3["clock"]> }>;
export async function startS3(options: StartS3Options & { readonly faults: true }): Promise<StartedS3 & { readonly faults: ServerFaults }>;
export async function startS3(options?: StartS3Options): Promise<StartedS3>;
export async function startS3(options: StartS3Options = {}): Promise<StartedS3> {
  // Faults need the server's process: only a cluster started here has it at hand.
  if (options.faults === true) return startLocalCeph(options.clock === true);
  const endpoint = process.env.S3_ENDPOINT;
  if (endpoint !== undefined && endpoint !== "") {
    const accessKeyId = process.env.S3_ACCESS_KEY_ID;
    const secretAccessKey = process.env.S3_SECRET_ACCESS_KEY;
    if (accessKeyId === undefined || secretAccessKey === undefined) {
      throw new Error("S3_ENDPOINT is set but S3_ACCESS_KEY_ID or S3_SECRET_ACCESS_KEY is not");
    }
    const region = process.env.S3_REGION ?? "us-east-1";
    return handle({ endpoint, region, accessKeyId, secretAccessKey, source: "env", cleanBuckets: true }, () => Promise.resolve());
  }
  if (await dockerAvailable()) return startMinio();
  return startLocalCeph(false);
}

interface Connection {
  endpoint: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  source: StartedS3["source"];
  /** Only a server we do not own needs its buckets removed: our own servers vanish whole. */
  cleanBuckets: boolean;
}

function handle(conn: Connection, shutdown: () => Promise<void>, faults?: ServerFaults): StartedS3 {
  const clients: S3Client[] = [];
  const buckets: string[] = [];
  const client = (options: { readonly maxSockets?: number } = {}): S3Client => {
    const agent = options.maxSockets === undefined ? undefined : new Agent({ keepAlive: true, maxSockets: options.maxSockets });
    const c = new S3Client({
      ...(agent === undefined
        ? {}
        : { requestHandler: { httpAgent: agent, httpsAgent: new HttpsAgent({ keepAlive: true, maxSockets: options.maxSockets }) } }),
      endpoint: conn.endpoint,
      region: conn.region,
      credentials: { accessKeyId: conn.accessKeyId, secretAccessKey: conn.secretAccessKey },
      forcePathStyle: true,
      // Default checksums make the SDK compute a trailer for stream bodies, which needs chunked
      // encoding radosgw answers with 411; checksums only where an operation requires them.
      requestChecksumCalculation: "WHEN_REQUIRED",
      responseChecksumValidation: "WHEN_REQUIRED",
    });
    clients.push(c);
    return c;
  };
  let admin: S3Client | undefined;
  let stopped: Promise<void> | undefined;
  return {
    endpoint: conn.endpoint,
    region: conn.region,
    accessKeyId: conn.accessKeyId,
    secretAccessKey: conn.secretAccessKey,
    forcePathStyle: true,
    source: conn.source,
    ...(faults === undefined ? {} : { faults }),
    client,
    async createBucket(name?: string): Promise<string> {
      const bucket = name ?? `fenced-${randomBytes(6).toString("hex")}`;
      admin ??= client();
      await admin.send(new CreateBucketCommand({ Bucket: bucket }));
      buckets.push(bucket);
      return bucket;
    },
    stop(): Promise<void> {
      stopped ??= (async () => {
        if (conn.cleanBuckets && admin !== undefined) {
          for (const bucket of buckets) await emptyAndDelete(admin, bucket).catch(() => undefined);
        }
        for (const c of clients) c.destroy();
        await shutdown();
      })();
      return stopped;
    },
  };
}

async function emptyAndDelete(client: S3Client, bucket: string): Promise<void> {
  let token: string | undefined;
  do {
    const page = await client.send(new ListObjectsV2Command({ Bucket: bucket, ContinuationToken: token }));
    const keys = (page.Contents ?? []).flatMap((o) => (o.Key === undefined ? [] : [{ Key: o.Key }]));
    if (keys.length > 0) await client.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: keys } }));
    token = page.NextContinuationToken;
  } while (token !== undefined);
  await client.send(new DeleteBucketCommand({ Bucket: bucket }));
}

async function startMinio(): Promise<StartedS3> {
  const { GenericContainer, Wait } = await import("testcontainers");
  const accessKeyId = "fenced";
  const secretAccessKey = randomBytes(12).toString("hex");
  const container = await new GenericContainer("minio/minio:latest")
    .withEnvironment({ MINIO_ROOT_USER: accessKeyId, MINIO_ROOT_PASSWORD: secretAccessKey })
    .withCommand(["server", "/data"])
    .withExposedPorts(9000)
    .withTmpFs({ "/data": "rw" })
    .withWaitStrategy(Wait.forHttp("/minio/health/live", 9000))
    .start();
  const endpoint = `http://${container.getHost()}:${container.getMappedPort(9000)}`;
  return handle({ endpoint, region: "us-east-1", accessKeyId, secretAccessKey, source: "docker", cleanBuckets: false }, async () => {
    await container.stop();
  });
}

const run = promisify(execFile);

interface CephBinaries {
  mon: string;
  osd: string;
  rgw: string;
  rgwAdmin: string;
  ceph: string;
  monmaptool: string;
}

function cephBinaries(): CephBinaries {
  return {
    mon: requireExecutable("ceph-mon", S3_INSTALL_HINT),
    osd: requireExecutable("ceph-osd", S3_INSTALL_HINT),
    rgw: requireExecutable("radosgw", S3_INSTALL_HINT),
    rgwAdmin: requireExecutable("radosgw-admin", S3_INSTALL_HINT),
    ceph: requireExecutable("ceph", S3_INSTALL_HINT),
    monmaptool: requireExecutable("monmaptool", S3_INSTALL_HINT),
  };
}

/** Everything under one directory, so that clusters started side by side (parallel test files) never meet. */
function cephConfig(dir: string, fsid: string, monPort: number): string {
  return `[global]
fsid = ${fsid}
mon_host = [v2:${LOOPBACK}:${monPort}]
public_addr = ${LOOPBACK}
cluster_addr = ${LOOPBACK}
ms_bind_msgr1 = false
run_dir = ${dir}/run
admin_socket = ${dir}/run/$name.asok
log_file = ${dir}/log/$name.log
# Throwaway state on loopback: no cephx. radosgw still negotiates a mode with the mon; crc is the one
# that works without keys.
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
ms_mon_client_mode = crc
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
# One host: replicas (there is one) are placed per OSD, not per host.
osd_crush_chooseleaf_type = 0
# radosgw creates its pools one map change at a time at first start; the default 1 s per change dominates start-up.
paxos_propose_interval = 0.05
# radosgw watches objects for cache notifications; a killed radosgw's watches stay until the OSD times
# them out, and until then every notification (a bucket created, a user changed) waits for it: 30 s
# by default. Clients ping their watches at each objecter tick: ticks of 0.5 s keep live ones alive.
osd_client_watch_timeout = 3
objecter_tick_interval = 0.5

[mon]
mon_data = ${dir}/mon/$id

[osd]
osd_data = ${dir}/osd/$id
osd_objectstore = memstore
memstore_device_bytes = ${MEMSTORE_BYTES}

[client]
rgw_thread_pool_size = 64
`;
}

async function startLocalCeph(clock: boolean): Promise<StartedS3 & { readonly faults: ServerFaults }> {
  const bins = cephBinaries();
  let lastError: unknown;
  // A port picked by freePort can be taken by someone else before the daemon binds it: start over with new ports.
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      return await startCephOnce(bins, clock);
    } catch (err) {
      lastError = err;
    }
  }
  throw lastError;
}

/** Cluster directories not yet removed: a process that exits without stop() still leaves none behind. */
const liveDirs = new Set<string>();
let exitHooked = false;

/** A cluster's directory and daemons: what its stop() kills and removes, and what a failed start prints. */
interface CephRun {
  readonly dir: string;
  readonly daemons: Spawned[];
  readonly shutdown: () => Promise<void>;
  readonly diagnostics: () => Promise<string>;
}

async function cephRun(): Promise<CephRun> {
  const dir = await mkdtemp(join(tmpdir(), "fenced-ceph-"));
  liveDirs.add(dir);
  if (!exitHooked) {
    exitHooked = true;
    // The daemons themselves are killed by spawnTracked's own exit hook.
    process.once("exit", () => {
      for (const d of liveDirs) rmSync(d, { recursive: true, force: true });
    });
  }
  const daemons: Spawned[] = [];
  const shutdown = async (): Promise<void> => {
    await Promise.all(daemons.map((d) => killHard(d)));
    await rm(dir, { recursive: true, force: true });
    liveDirs.delete(dir);
  };
  const diagnostics = async (): Promise<string> => {
    const parts = daemons.map((d) => d.output());
    try {
      for (const file of await readdir(join(dir, "log"))) {
        parts.push(`--- ${file}\n${(await readFile(join(dir, "log", file), "utf8")).slice(-3_000)}`);
      }
    } catch {
      // no logs yet
    }
    return parts.join("\n");
  };
  return { dir, daemons, shutdown, diagnostics };
}

/**
 * Waits until radosgw answers HTTP. A daemon that dies meanwhile (bad config, port taken) fails the
 * wait at once, not at the timeout.
 */
async function awaitRadosgw(cluster: CephRun, endpoint: string, watched: readonly (readonly [string, Spawned])[]): Promise<void> {
  let exited: string | undefined;
  for (const [name, daemon] of watched) void daemon.exited.then(() => (exited ??= name));
  try {
    // A daemon that exits ends the wait at once: it will not come back by itself.
    await waitFor(
      "radosgw to answer HTTP",
      async () => exited !== undefined || (await fetch(endpoint, { signal: AbortSignal.timeout(2_000) })).status < 500,
      START_TIMEOUT_MS,
    );
  } catch (err) {
    throw new Error(`${err instanceof Error ? err.message : String(err)}\n${await cluster.diagnostics()}`);
  }
  if (exited !== undefined) throw new Error(`${exited} exited during start-up\n${await cluster.diagnostics()}`);
}

async function startCephOnce(bins: CephBinaries, clock: boolean): Promise<StartedS3 & { readonly faults: ServerFaults }> {
  const cluster = await cephRun();
  const { dir, daemons } = cluster;
  try {
    const fsid = randomUUID();
    const [monPort, rgwPort] = [await freePort(), await freePort()];
    const conf = join(dir, "ceph.conf");
    await Promise.all(["run", "log", "mon/a", "osd/0"].map((d) => mkdir(join(dir, d), { recursive: true })));
    await writeFile(conf, cephConfig(dir, fsid, monPort));
    const c = ["-c", conf];
    const exec = (file: string, args: string[]): Promise<{ stdout: string }> => run(file, args, { timeout: START_TIMEOUT_MS, cwd: dir });

    await exec(bins.monmaptool, ["--create", "--fsid", fsid, "--addv", "a", `[v2:${LOOPBACK}:${monPort}]`, join(dir, "monmap")]);
    await exec(bins.mon, [...c, "--mkfs", "-i", "a", "--monmap", join(dir, "monmap")]);
    daemons.push(spawnTracked(bins.mon, [...c, "-f", "-i", "a"], { cwd: dir }));

    // Registering the OSD needs the mon (the CLI waits for it); formatting its memstore does not.
    const osdUuid = randomUUID();
    const [registered] = await Promise.all([
      exec(bins.ceph, [...c, "--connect-timeout", "20", "osd", "new", osdUuid]),
      exec(bins.osd, [...c, "-i", "0", "--mkfs", "--osd-uuid", osdUuid]),
    ]);
    if (registered.stdout.trim() !== "0") throw new Error(`expected OSD id 0, the mon answered ${registered.stdout}`);
    daemons.push(spawnTracked(bins.osd, [...c, "-f", "-i", "0"], { cwd: dir }));

    // radosgw waits for the OSD by itself (its pools cannot be created before one is up).
    const frontends = `beast endpoint=${LOOPBACK}:${rgwPort} tcp_nodelay=1`;
    // tcp_nodelay: without it beast's small header and body writes meet the client's delayed ACK
    // and every small GET takes about 40 ms.
    const offsetFile = join(dir, "rgw-clock-offset");
    if (clock) writeClockOffset(offsetFile, 0);
    const env = clock ? { ...process.env, LD_PRELOAD: compileClockShim(), [CLOCK_OFFSET_FILE_ENV]: offsetFile } : undefined;
    const launchRgw = (): Spawned => {
      const rgw = spawnTracked(bins.rgw, [...c, "-f", "-n", "client.rgw", "--rgw_frontends", frontends], { cwd: dir, env });
      daemons.push(rgw); // stop() kills it with the cluster
      return rgw;
    };
    const [mon, osd] = daemons as [Spawned, Spawned];
    const rgw = launchRgw();
    const endpoint = `http://${LOOPBACK}:${rgwPort}`;
    await awaitRadosgw(cluster, endpoint, [
      ["ceph-mon", mon],
      ["ceph-osd", osd],
      ["radosgw", rgw],
    ]);

    const accessKeyId = `fenced${randomBytes(6).toString("hex")}`;
    const secretAccessKey = randomBytes(20).toString("hex");
    await exec(bins.rgwAdmin, [
      ...c,
      "user",
      "create",
      "--uid",
      "fenced",
      "--display-name",
      "fenced",
      "--access-key",
      accessKeyId,
      "--secret-key",
      secretAccessKey,
    ]);
    const faults = new RadosgwFaults(rgw, async () => {
      const again = launchRgw();
      await awaitRadosgw(cluster, endpoint, [["radosgw", again]]);
      return again;
    });
    const conn = { endpoint, region: "us-east-1", accessKeyId, secretAccessKey, source: "local", cleanBuckets: false } as const;
    const clockControl = clock ? { clock: { setOffsetMs: (ms: number) => writeClockOffset(offsetFile, ms) } } : {};
    return { ...handle(conn, cluster.shutdown, faults), faults, ...clockControl };
  } catch (err) {
    await cluster.shutdown();
    throw err;
  }
}

/**
 * Faults of a local cluster's radosgw, the one process that serves S3. The mon and the OSD (which
 * holds the objects, in memory) keep running, so a restarted radosgw serves the same buckets, users
 * and objects on the same port. For up to 3 s after a kill (osd_client_watch_timeout), a metadata
 * change such as creating a bucket waits for the dead radosgw's watches to expire; object reads and
 * writes do not.
 */
class RadosgwFaults implements ServerFaults {
  private killed = false;
  private stopped = false;

  constructor(
    private rgw: Spawned,
    /** Launches radosgw again; resolves once it answers HTTP. */
    private readonly relaunch: () => Promise<Spawned>,
  ) {}

  get running(): boolean {
    return !this.killed;
  }

  get paused(): boolean {
    return this.stopped;
  }

  /** SIGSTOP: its sockets stay open (connections are accepted by the kernel's backlog) and nothing answers. */
  pause(): void {
    if (this.killed) throw new Error("radosgw is killed; restart() it before pausing");
    stopTree(this.rgw);
    this.stopped = true;
  }

  resume(): void {
    continueTree(this.rgw);
    this.stopped = false;
  }

  async kill(): Promise<void> {
    await killHard(this.rgw);
    this.killed = true;
    this.stopped = false;
  }

  async restart(): Promise<void> {
    if (!this.killed) await this.kill();
    this.rgw = await this.relaunch();
    this.killed = false;
  }
}
