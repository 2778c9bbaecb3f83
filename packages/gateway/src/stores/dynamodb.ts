import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { z } from "zod";
import type { FencedDynamo, FencedDynamoOptions } from "@fenced/store/dynamodb";
import { said } from "./check.js";
import type { StoreDefinition } from "./registration.js";
import { awsCode } from "./aws-code.js";

/** createGateway's `records` on DynamoDB: FencedDynamo with this client. */
export type DynamoRecordsOptions = { readonly client: DynamoDBClient } & FencedDynamoOptions;

export const dynamoSection = z
  .strictObject({
    table: z.string().min(1).describe("the table, partition key `key` (a String), no sort key (enables /v1/records on DynamoDB)"),
    endpoint: z.string().url().optional().describe("DynamoDB endpoint URL (default: AWS)"),
    region: z.string().min(1).default("us-east-1").describe("DynamoDB region (default us-east-1)"),
    prefix: z.string().optional().describe("prefix of every item's key the store writes, empty or ending in / (default fenced/)"),
    accessKeyId: z.string().min(1).optional().describe("AWS access key id (default: the AWS SDK's credential chain)"),
    secretAccessKey: z.string().min(1).optional().describe("AWS secret access key, given with accessKeyId"),
    checkResourceFence: z
      .boolean()
      .optional()
      .describe("every write also reads the resource's fence item, so that a register() refuses older tokens on every key (default true)"),
  })
  .refine(
    (s) => (s.accessKeyId === undefined) === (s.secretAccessKey === undefined),
    "give both accessKeyId and secretAccessKey, or neither (the AWS default chain)",
  );

/** The records family on DynamoDB (FencedDynamo): no transaction, so no putAll. */
export const dynamoRecords: StoreDefinition<"records", "dynamodb", typeof dynamoSection, DynamoRecordsOptions, FencedDynamo> = {
  family: "records",
  name: "dynamodb",
  title: "DynamoDB",
  fenceDescription: "DynamoDB's fence item (present when the gateway serves records from DynamoDB)",
  config: {
    section: dynamoSection,
    settings: [
      { field: "table", variable: "FENCED_GATEWAY_DYNAMODB_TABLE", flag: "--dynamodb-table <table>", read: "text" },
      { field: "endpoint", variable: "FENCED_GATEWAY_DYNAMODB_ENDPOINT", flag: "--dynamodb-endpoint <url>", read: "text" },
      { field: "region", variable: "FENCED_GATEWAY_DYNAMODB_REGION", flag: "--dynamodb-region <region>", read: "text" },
      { field: "prefix", variable: "FENCED_GATEWAY_DYNAMODB_PREFIX", flag: "--dynamodb-prefix <prefix>", read: "text" },
      { field: "accessKeyId", variable: "FENCED_GATEWAY_DYNAMODB_ACCESS_KEY_ID", read: "text" },
      { field: "secretAccessKey", variable: "FENCED_GATEWAY_DYNAMODB_SECRET_ACCESS_KEY", read: "text" },
    ],
    enabledBy: { field: "table", what: "table" },
    sweepFields: [],
  },

  accepts: (options): options is DynamoRecordsOptions => "table" in options,

  load: () => import("./dynamodb-driver.js").then((driver) => driver.dynamoDriver),

  async prepare(store, { verify }, call) {
    if (verify ?? true) await call("verify", () => store.verify());
  },

  backendCode: awsCode,

  startRefusal(check, timeoutMs) {
    switch (check.problem) {
      case "access-denied":
        return `DynamoDB refused the credentials${said(check)}: check the access key id and secret, and that they may use the table`;
      case "no-such-table":
        return "DynamoDB answered that the table does not exist: create it (partition key `key`, a String), or name an existing one (dynamodb.table)";
      case "no-credentials":
        return `no AWS credentials could be loaded${said({ detail: check.detail })}: give dynamodb.accessKeyId and dynamodb.secretAccessKey, or set up the AWS SDK's credential chain`;
      default:
    }
    switch (check.state) {
      case "refused":
        return `DynamoDB refused the connection${said(check)}: check the endpoint URL (dynamodb.endpoint) and that the server runs`;
      case "timeout":
        return `DynamoDB did not answer within ${timeoutMs} ms: check the endpoint URL (dynamodb.endpoint) and that it is reachable from here`;
      default:
        return `DynamoDB did not confirm the table${said(check)}: check the endpoint, the credentials and the table`;
    }
  },

  backendFix: (_code, operation) =>
    "check the endpoint, the credentials and that they may describe the table and get, put and delete its items" +
    (operation === "verify" ? ", or start with --no-verify" : ""),

  // Its sweep answers this without loading the driver.
  nothingToSweep:
    "nothing to sweep: every value is inline in its key's manifest item, so no write, failed or abandoned, leaves anything behind",
};
