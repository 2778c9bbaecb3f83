// `pnpm servers`: the servers the tests start, for trying fenced by hand — three Redis lock nodes,
// PostgreSQL, S3 (radosgw, with a bucket), DynamoDB (dynalite, with a table keyed as FencedDynamo
// needs: partition key `key`, a String) and Azure Blob (azurite, with a container) on free loopback
// ports — until Ctrl-C, which stops them and removes their files. It prints the `export` lines that
// point the README's examples and its gateway command at them (REDIS_URLS, DATABASE_URL, the S3_*,
// DYNAMODB_* and AZURE_* variables, which the test servers
// also read — `pnpm test` or `pnpm demo` in that shell uses these servers; the gateway's API key,
// `$KEY`, for `orders/` and `accounts/`, a fence key made here and the S3 credentials, which the gateway takes only
// from its environment), to paste into another shell.
import { randomBytes } from "node:crypto";
import {
  startAzureBlob,
  startDynamo,
  startPostgres,
  startRedisNodes,
  startS3,
  type RedisNodes,
  type StartedAzureBlob,
  type StartedDynamo,
  type StartedPostgres,
  type StartedS3,
} from "./index.js";

const quote = (value: string): string => `'${value.replace(/'/g, `'\\''`)}'`;

/** The shell lines, one variable each. */
function exportLines(
  redis: RedisNodes,
  postgres: StartedPostgres,
  s3: StartedS3,
  bucket: string,
  dynamo: StartedDynamo,
  table: string,
  azure: StartedAzureBlob,
  container: string,
): string[] {
  const key = `try-${randomBytes(12).toString("hex")}`;
  const variables: [string, string][] = [
    ["REDIS_URLS", redis.urls.join(",")],
    ["DATABASE_URL", postgres.url],
    ["KEY", key],
    ["FENCED_GATEWAY_API_KEYS", JSON.stringify([{ id: "try", key, resources: ["orders/", "accounts/"], keys: ["orders/", "accounts/"] }])],
    ["FENCED_GATEWAY_FENCE_KEYS", JSON.stringify([{ id: "try", secret: randomBytes(32).toString("base64") }])],
    ["S3_ENDPOINT", s3.endpoint],
    ["S3_BUCKET", bucket],
    ["S3_REGION", s3.region],
    ["S3_ACCESS_KEY_ID", s3.accessKeyId],
    ["S3_SECRET_ACCESS_KEY", s3.secretAccessKey],
    ["FENCED_GATEWAY_S3_REGION", s3.region],
    ["FENCED_GATEWAY_S3_ACCESS_KEY_ID", s3.accessKeyId],
    ["FENCED_GATEWAY_S3_SECRET_ACCESS_KEY", s3.secretAccessKey],
    ["DYNAMODB_ENDPOINT", dynamo.endpoint],
    ["DYNAMODB_TABLE", table],
    ["AZURE_STORAGE_CONNECTION_STRING", azure.connectionString],
    ["AZURE_BLOB_CONTAINER", container],
  ];
  return variables.map(([name, value]) => `export ${name}=${quote(value)}`);
}

const [redis, postgres, s3, dynamo, azure] = await Promise.all([
  startRedisNodes(3),
  startPostgres(),
  startS3(),
  startDynamo(),
  startAzureBlob(),
]);
const stop = async (): Promise<void> => {
  await Promise.allSettled([redis.stop(), postgres.stop(), s3.stop(), dynamo.stop(), azure.stop()]);
  process.exit(0);
};
process.once("SIGINT", () => void stop());
process.once("SIGTERM", () => void stop());
const bucket = await s3.createBucket();
const table = await dynamo.createTable("fenced");
const container = await azure.createContainer("fenced");
process.stderr.write(
  `redis ${redis.source}, postgres ${postgres.source}, s3 ${s3.source}, dynamodb (dynalite), azure blob (azurite): up until Ctrl-C. In another shell:\n`,
);
process.stdout.write(`${exportLines(redis, postgres, s3, bucket, dynamo, table, azure, container).join("\n")}\n`);
