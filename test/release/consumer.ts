// A user's program, written against the published packages only. release.test.ts installs the packed
// tarballs into a project of their own (with the user's ioredis, iovalkey, node-redis, GLIDE, pg and AWS SDK), copies
// this file in as consumer.mts and consumer.cts, type-checks both, and runs them against real
// servers: the .mts as an ES module, the .cts compiled to CommonJS, so that every import below
// becomes a require().
// No top-level await and no import.meta: the same text must be valid CommonJS.
import { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { BlobServiceClient, StorageSharedKeyCredential } from "@azure/storage-blob";
import { S3Client } from "@aws-sdk/client-s3";
import { GlideClient } from "@valkey/valkey-glide";
import { InvalidArgumentError, type Fence } from "@fenced/fence";
import { createGateway, type GatewayOptions } from "@fenced/gateway";
import { fromNodeRedis, fromValkeyGlide, Redlock, type Lease } from "@fenced/lock";
import { StaleTokenError } from "@fenced/store";
import { FencedDynamo } from "@fenced/store/dynamodb";
import { FencedAzureBlob } from "@fenced/store/azure-blob";
import { FencedPostgres } from "@fenced/store/postgres";
import { FencedS3 } from "@fenced/store/s3";
import { Redis } from "ioredis";
import { Redis as Valkey } from "iovalkey";
import pg from "pg";
import { createClient } from "redis";

/** What one store did with a fresh write and then a stale one; the test judges it. */
interface StoreOutcome {
  readonly store: "postgres" | "s3" | "dynamodb" | "azure-blob";
  readonly firstToken: string;
  readonly secondToken: string;
  /** Whether the write with the first (older) token threw a StaleTokenError, by instanceof. */
  readonly staleRefused: boolean;
  readonly refusal: { readonly name: string; readonly token: string; readonly highest: string } | null;
  /** What the store holds afterwards. */
  readonly stored: string | null;
  readonly storedToken: string | null;
}

export interface ConsumerReport {
  readonly module: "esm" | "cjs";
  readonly stores: readonly StoreOutcome[];
  /** A bad key is refused before any I/O with the one InvalidArgumentError class of @fenced/fence. */
  readonly badKeyRefusedByFenceClass: boolean;
  /** import() and require() of @fenced/store hand out the same StaleTokenError class (no dual package). */
  readonly sameClassFromImport: boolean;
  readonly createGatewayIsFunction: boolean;
  /**
   * One resource leased over each client the user made, in turn: ioredis, iovalkey (Valkey's fork of
   * ioredis) as they are, node-redis through fromNodeRedis, GLIDE through fromValkeyGlide. Each
   * lease's token.
   */
  readonly clientTokens: readonly string[];
}

function env(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === "") throw new Error(`${name} is not set`);
  return value;
}

interface Writer {
  register(fence: Fence): Promise<void>;
  put(key: string, value: string, fence: Fence): Promise<void>;
  read(key: string): Promise<{ value: string; token: bigint } | undefined>;
}

/** acquire → register → put; release; the next lease writes; the first lease's late write must be refused. */
async function staleWriteIsRefused(store: StoreOutcome["store"], redlock: Redlock, writer: Writer, run: string): Promise<StoreOutcome> {
  const resource = `consumer/${run}/${store}`;
  const key = `${resource}/document`;
  const first: Lease = await redlock.acquire(resource, 10_000);
  await writer.register(first);
  await writer.put(key, "from the first lease", first);
  // The fence as a request built before a pause carries it: a copy. The Lease itself knows it was
  // released, and a store refuses it before any I/O; the storage's own check is what is tested here.
  const stale: Fence = { resource: first.resource, token: first.token, holder: first.holder };
  await first.release();

  const second = await redlock.acquire(resource, 10_000);
  await writer.register(second);
  await writer.put(key, "from the second lease", second);

  let refusal: StoreOutcome["refusal"] = null;
  let staleRefused = false;
  try {
    // The first holder, paused past its lease, wakes up and writes.
    await writer.put(key, "late write from the first lease", stale);
  } catch (err) {
    staleRefused = err instanceof StaleTokenError;
    if (err instanceof StaleTokenError) refusal = { name: err.name, token: err.token.toString(), highest: err.highest.toString() };
    else throw err;
  }
  await second.release();
  const stored = await writer.read(key);
  return {
    store,
    firstToken: first.token.toString(),
    secondToken: second.token.toString(),
    staleRefused,
    refusal,
    stored: stored?.value ?? null,
    storedToken: stored?.token.toString() ?? null,
  };
}

async function main(): Promise<void> {
  const module = process.argv[2] === "cjs" ? "cjs" : "esm";
  const run = `${env("CONSUMER_RUN")}-${module}`;
  const clients = env("REDIS_URLS")
    .split(",")
    .map((url) => new Redis(url));
  const redlock = new Redlock(clients, { retryCount: 3 });
  const pool = new pg.Pool({ connectionString: env("DATABASE_URL"), max: 2 });
  const s3 = new S3Client({
    endpoint: env("S3_ENDPOINT"),
    region: env("S3_REGION"),
    forcePathStyle: true,
    credentials: { accessKeyId: env("S3_ACCESS_KEY_ID"), secretAccessKey: env("S3_SECRET_ACCESS_KEY") },
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
  });
  const dynamodb = new DynamoDBClient({
    endpoint: env("DYNAMODB_ENDPOINT"),
    region: env("S3_REGION"),
    credentials: { accessKeyId: env("S3_ACCESS_KEY_ID"), secretAccessKey: env("S3_SECRET_ACCESS_KEY") },
  });
  try {
    const postgres = new FencedPostgres(pool, { schema: `consumer_${run.replace(/[^a-z0-9]/gi, "_")}` });
    await postgres.migrate();
    const objects = new FencedS3(s3, { bucket: env("S3_BUCKET"), prefix: `${run}/` });
    await objects.verify();
    const items = new FencedDynamo(dynamodb, { table: env("DYNAMODB_TABLE"), prefix: `${run}/` });
    await items.verify();
    const azure = new BlobServiceClient(
      env("AZURE_BLOB_URL"),
      new StorageSharedKeyCredential(env("AZURE_BLOB_ACCOUNT"), env("AZURE_BLOB_KEY")),
    ).getContainerClient(env("AZURE_BLOB_CONTAINER"));
    const blobs = new FencedAzureBlob(azure, { prefix: `${run}/` });
    await blobs.verify();

    const stores = [
      await staleWriteIsRefused(
        "postgres",
        redlock,
        {
          register: (fence) => postgres.register(fence),
          put: async (key, value, fence) => void (await postgres.put(key, { value }, { fence })),
          read: async (key) => {
            const record = await postgres.get<{ value: string }>(key);
            return record && { value: record.value.value, token: record.token };
          },
        },
        run,
      ),
      await staleWriteIsRefused(
        "s3",
        redlock,
        {
          register: (fence) => objects.register(fence),
          put: async (key, value, fence) => void (await objects.put(key, value, { fence, contentType: "text/plain" })),
          read: async (key) => {
            const object = await objects.getBytes(key);
            return object && { value: object.body.toString("utf8"), token: object.token };
          },
        },
        run,
      ),
      await staleWriteIsRefused(
        "dynamodb",
        redlock,
        {
          register: (fence) => items.register(fence),
          put: async (key, value, fence) => void (await items.put(key, { value }, { fence })),
          read: async (key) => {
            const record = await items.get(key);
            return record && { value: (record.value as { value: string }).value, token: record.token };
          },
        },
        run,
      ),
      await staleWriteIsRefused(
        "azure-blob",
        redlock,
        {
          register: (fence) => blobs.register(fence),
          put: async (key, value, fence) => void (await blobs.put(key, value, { fence, contentType: "text/plain" })),
          read: async (key) => {
            const blob = await blobs.getBytes(key);
            return blob && { value: blob.body.toString("utf8"), token: blob.token };
          },
        },
        run,
      ),
    ];

    let badKeyRefusedByFenceClass = false;
    try {
      await postgres.put("", { value: "never written" }, { fence: { resource: "consumer", token: 1n } });
    } catch (err) {
      badKeyRefusedByFenceClass = err instanceof InvalidArgumentError;
    }
    // The lock takes iovalkey's clients as they are, node-redis's through fromNodeRedis and GLIDE's
    // through fromValkeyGlide: each lease after one over ioredis carries the next token.
    const urls = env("REDIS_URLS").split(",");
    const valkeyClients = urls.map((url) => new Valkey(url));
    const nodeRedisClients = urls.map((url) => createClient({ url }));
    const glideClients: GlideClient[] = [];
    const clientTokens: string[] = [];
    try {
      await Promise.all(nodeRedisClients.map((client) => client.connect()));
      for (const url of urls) {
        const { hostname, port } = new URL(url);
        glideClients.push(await GlideClient.createClient({ addresses: [{ host: hostname, port: Number(port) }] }));
      }
      const locks = [
        redlock,
        new Redlock(valkeyClients, { retryCount: 3 }),
        new Redlock(nodeRedisClients.map(fromNodeRedis), { retryCount: 3 }),
        new Redlock(glideClients.map(fromValkeyGlide), { retryCount: 3 }),
      ];
      for (const lock of locks) {
        const lease = await lock.acquire(`consumer/${run}/clients`, 10_000);
        clientTokens.push(lease.token.toString());
        await lease.release();
      }
    } finally {
      for (const client of valkeyClients) client.disconnect();
      for (const client of nodeRedisClients) if (client.isOpen) client.destroy();
      for (const client of glideClients) client.close();
    }
    const imported = await import("@fenced/store");
    const options: Pick<GatewayOptions, "apiKeys"> = { apiKeys: [] };
    const report: ConsumerReport = {
      module,
      stores,
      badKeyRefusedByFenceClass,
      sameClassFromImport: imported.StaleTokenError === StaleTokenError,
      createGatewayIsFunction: typeof createGateway === "function" && Array.isArray(options.apiKeys),
      clientTokens,
    };
    process.stdout.write(`${JSON.stringify(report)}\n`);
  } finally {
    await pool.end();
    s3.destroy();
    dynamodb.destroy();
    for (const client of clients) client.disconnect();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
