// DynamoDB for tests: dynalite (npm; DynamoDB's API over LevelDB), on a free loopback port, its tables
// on disk in a scratch folder so that a restart keeps them. What it has, as tried here: PutItem,
// UpdateItem and DeleteItem with a ConditionExpression (ConditionalCheckFailedException when it
// fails), GetItem with ConsistentRead. What it has not: TransactWriteItems (UnknownOperationException).
import { createRequire } from "node:module";
import { randomBytes } from "node:crypto";
import { CreateTableCommand, DescribeTableCommand, DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { startEmulator } from "./emulator.js";
import { waitFor } from "./processes.js";
import type { ServerFaults } from "./faults.js";

export interface StartedDynamo {
  readonly endpoint: string;
  readonly region: string;
  /** dynalite checks that a request is signed, not by whom: any pair works, these are the ones handed out. */
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  /** A new client for this server. */
  client(): DynamoDBClient;
  /** A table name no other test uses (dynalite needs 3 to 255 characters). */
  tableName(prefix?: string): string;
  /**
   * Creates a table keyed as FencedDynamo needs (partition key `key`, a String; another key name
   * when given) under a fresh name unless given, and resolves with its name once it is ACTIVE:
   * dynalite answers CreateTable while the table is still CREATING, and until it is ACTIVE a read
   * of it is ResourceNotFoundException (seen under load), and a kill loses it.
   */
  createTable(name?: string, keyName?: string): Promise<string>;
  /** SIGSTOP, SIGCONT, SIGKILL and a restart (on the same port, with its tables) of the dynalite process. */
  readonly faults: ServerFaults;
  /** Stops it and removes its files; idempotent. */
  stop(): Promise<void>;
}

const require = createRequire(import.meta.url);

/** How long dynalite may take to answer after it is spawned: it answers in about 0.2 s here, alone. */
const START_TIMEOUT_MS = 30_000;

export async function startDynamo(): Promise<StartedDynamo> {
  const running = await startEmulator({
    name: "dynalite",
    entry: require.resolve("dynalite/cli.js"),
    // No table waits in CREATING or DELETING: a test makes its table and uses it.
    args: (port, dir) => ["--host", "127.0.0.1", "--port", String(port), "--path", dir, "--createTableMs", "0", "--deleteTableMs", "0"],
    startTimeoutMs: START_TIMEOUT_MS,
  });
  const clients: DynamoDBClient[] = [];
  const tableName = (prefix = "fenced"): string => `${prefix}-${randomBytes(6).toString("hex")}`;
  const region = "us-east-1";
  const accessKeyId = "fenced";
  const secretAccessKey = "fenced-secret";
  return {
    endpoint: running.endpoint,
    region,
    accessKeyId,
    secretAccessKey,
    client() {
      const client = new DynamoDBClient({ endpoint: running.endpoint, region, credentials: { accessKeyId, secretAccessKey } });
      clients.push(client);
      return client;
    },
    tableName,
    async createTable(name = tableName(), keyName = "key") {
      const admin = new DynamoDBClient({ endpoint: running.endpoint, region, credentials: { accessKeyId, secretAccessKey } });
      try {
        await admin.send(
          new CreateTableCommand({
            TableName: name,
            AttributeDefinitions: [{ AttributeName: keyName, AttributeType: "S" }],
            KeySchema: [{ AttributeName: keyName, KeyType: "HASH" }],
            BillingMode: "PAY_PER_REQUEST",
          }),
        );
        await waitFor(
          `DynamoDB table ${name} to be ACTIVE`,
          async () => (await admin.send(new DescribeTableCommand({ TableName: name }))).Table?.TableStatus === "ACTIVE",
          START_TIMEOUT_MS,
        );
      } finally {
        admin.destroy();
      }
      return name;
    },
    faults: running.faults,
    async stop() {
      for (const client of clients.splice(0)) client.destroy();
      await running.stop();
    },
  };
}
