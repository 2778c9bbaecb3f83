import { performance } from "node:perf_hooks";
import { FencedS3 } from "@fenced/store/s3";
import { FencedDynamo } from "@fenced/store/dynamodb";
import { FencedAzureBlob } from "@fenced/store/azure-blob";
import { startAzureBlob, startDynamo, startPostgres, startRedisNodes, startS3, type RedisNodes } from "@fenced/servers";
import { azureContainer, dropBackend, dynamoClient, prepareBackend, s3Client, type BackendConfig, type BackendName } from "./backends.js";

export interface DemoServers {
  /** Lock nodes for the scenarios that need no clock control (REDIS_URLS when given). */
  readonly lock: RedisNodes | undefined;
  /** Lock nodes the demo starts itself, node C under the clock shim; the same as `lock` when it can be. */
  readonly clockLock: RedisNodes | undefined;
  readonly backends: ReadonlyMap<BackendName, BackendConfig>;
  /** One line per server: what it is and where it came from. */
  readonly used: readonly string[];
  /** Tears down everything this call started; idempotent. */
  stop(): Promise<void>;
}

export interface ServerNeeds {
  readonly clock: boolean;
  readonly plain: boolean;
  readonly backends: readonly BackendName[];
}

/**
 * Brings up what the chosen scenarios need, in parallel: five Redis nodes, PostgreSQL, S3, DynamoDB
 * (dynalite, always started here), Azure Blob (azurite, always started here). Each
 * comes from the environment when configured (REDIS_URLS, DATABASE_URL, S3_ENDPOINT …), else from
 * a Docker engine if one answers, else from this machine's binaries (redis-server, PostgreSQL,
 * Ceph radosgw). The clock-jump scenario always gets local nodes: the clock shim is an LD_PRELOAD.
 */
export async function startDemoServers(needs: ServerNeeds, nonce: string, progress: (message: string) => void): Promise<DemoServers> {
  const stops: (() => Promise<void>)[] = [];
  const used: string[] = [];
  const backends = new Map<BackendName, BackendConfig>();
  let lock: RedisNodes | undefined;
  let clockLock: RedisNodes | undefined;

  const step = async <T>(what: string, start: () => Promise<T>): Promise<T> => {
    progress(`starting ${what}…`);
    const t0 = performance.now();
    const value = await start();
    progress(`${what} ready in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    return value;
  };

  const envRedis = (process.env.REDIS_URLS ?? "").trim() !== "";
  const tasks: Promise<void>[] = [];
  if (needs.clock) {
    tasks.push(
      step("5 Redis nodes A–E (node C under a clock shim)", async () => {
        const nodes = await startRedisNodes(5, { clockControl: [2] });
        clockLock = nodes;
        stops.push(() => nodes.stop());
        used.push(`lock nodes${needs.plain && envRedis ? " for clock-jump" : ""}: ${describeRedis(nodes, true)}`);
      }),
    );
  }
  if (needs.plain && (!needs.clock || envRedis)) {
    tasks.push(
      step("5 Redis nodes A–E", async () => {
        const nodes = await startRedisNodes(5);
        lock = nodes;
        stops.push(() => nodes.stop());
        used.push(`lock nodes: ${describeRedis(nodes, false)}`);
      }),
    );
  }
  if (needs.backends.includes("postgres")) {
    tasks.push(
      step("PostgreSQL", async () => {
        const pg = await startPostgres();
        const config: BackendConfig = { kind: "postgres", url: pg.url, schema: `fenced_demo_${nonce}` };
        stops.push(async () => {
          if (pg.source === "env") await dropBackend(config).catch(() => undefined);
          await pg.stop();
        });
        await prepareBackend(config);
        backends.set("postgres", config);
        const where = {
          env: "DATABASE_URL",
          docker: "a postgres:16 container (Docker)",
          local: "a private PostgreSQL server from this machine's binaries",
        }[pg.source];
        used.push(`Postgres: ${where} at ${redact(pg.url)}, schema ${config.schema}`);
      }),
    );
  }
  if (needs.backends.includes("s3")) {
    tasks.push(
      step("S3", async () => {
        const s3 = await startS3();
        stops.push(() => s3.stop());
        const bucket = await s3.createBucket();
        const config: BackendConfig = {
          kind: "s3",
          endpoint: s3.endpoint,
          region: s3.region,
          accessKeyId: s3.accessKeyId,
          secretAccessKey: s3.secretAccessKey,
          bucket,
          prefix: `demo-${nonce}/`,
        };
        // Prove that this server really refuses a stale If-Match: the fenced writes rest on it.
        const client = s3Client(config);
        try {
          await new FencedS3(client, { bucket, prefix: config.prefix }).verify();
        } finally {
          client.destroy();
        }
        backends.set("s3", config);
        const where = {
          env: "S3_ENDPOINT",
          docker: "a MinIO container (Docker)",
          local: "Ceph radosgw, a one-host Ceph cluster started from this machine's binaries",
        }[s3.source];
        used.push(`S3: ${where} at ${s3.endpoint}, bucket ${bucket} (checked: refuses a stale If-Match)`);
      }),
    );
  }

  if (needs.backends.includes("dynamodb")) {
    tasks.push(
      step("DynamoDB (dynalite)", async () => {
        const dynamo = await startDynamo();
        stops.push(() => dynamo.stop());
        const config: BackendConfig = {
          kind: "dynamodb",
          endpoint: dynamo.endpoint,
          region: dynamo.region,
          accessKeyId: dynamo.accessKeyId,
          secretAccessKey: dynamo.secretAccessKey,
          table: dynamo.tableName("fenced-demo"),
          prefix: `demo-${nonce}/`,
        };
        await prepareBackend(config);
        // Prove that this table is keyed as the store needs and refuses a stale condition.
        const client = dynamoClient(config);
        try {
          await new FencedDynamo(client, { table: config.table, prefix: `${config.prefix}fenced/` }).verify();
        } finally {
          client.destroy();
        }
        backends.set("dynamodb", config);
        used.push(
          `DynamoDB: dynalite, an emulator started from npm, at ${dynamo.endpoint}, table ${config.table} (checked: refuses a stale condition)`,
        );
      }),
    );
  }

  if (needs.backends.includes("azure-blob")) {
    tasks.push(
      step("Azure Blob (azurite)", async () => {
        const azure = await startAzureBlob();
        stops.push(() => azure.stop());
        const container = await azure.createContainer();
        const config: BackendConfig = {
          kind: "azure-blob",
          url: azure.url,
          accountName: azure.accountName,
          accountKey: azure.accountKey,
          container,
          prefix: `demo-${nonce}/`,
        };
        // Prove that this container is there and refuses a stale If-Match: the fenced writes rest on it.
        await new FencedAzureBlob(azureContainer(config), { prefix: `${config.prefix}fenced/` }).verify();
        backends.set("azure-blob", config);
        used.push(
          `Azure Blob: azurite, an emulator started from npm, at ${azure.url}, container ${container} (checked: refuses a stale If-Match)`,
        );
      }),
    );
  }

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => (stopping ??= Promise.allSettled(stops.map((s) => s())).then(() => undefined));
  const results = await Promise.allSettled(tasks);
  const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (failed !== undefined) {
    await stop();
    throw failed.reason;
  }
  return { lock: lock ?? (needs.plain ? clockLock : undefined), clockLock, backends, used, stop };
}

function describeRedis(nodes: RedisNodes, clock: boolean): string {
  const ports = nodes.nodes.map((n) => `${n.name}=${n.host}:${n.port}`).join(" ");
  if (nodes.source === "env") return `REDIS_URLS (${ports})`;
  if (nodes.source === "docker") return `5 redis:7 containers (Docker): ${ports}`;
  return `5 local redis-server processes, appendfsync always${clock ? ", node C under the clock shim" : ""}: ${ports}`;
}

/** Connection strings may carry a password; the narration must not. */
function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== "") u.password = "***";
    return u.toString();
  } catch {
    return "(unparsable URL)";
  }
}
