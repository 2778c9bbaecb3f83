// DynamoDB's driver, on the AWS SDK's DynamoDB client (its registration: dynamodb.ts).
import { DescribeTableCommand, DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { FencedDynamo } from "@fenced/store/dynamodb";
import { message, systemCode, within } from "./check.js";
import type { StoreDriver } from "./registration.js";
import type { DynamoRecordsOptions, dynamoSection } from "./dynamodb.js";
import { awsCode, CREDENTIALS_PROVIDER_ERROR } from "./aws-code.js";

export const dynamoDriver: StoreDriver<typeof dynamoSection, DynamoRecordsOptions, FencedDynamo> = {
  fromSection({ table, endpoint, region, prefix, accessKeyId, secretAccessKey, checkResourceFence }, { closers }) {
    const client = new DynamoDBClient({
      region,
      ...(endpoint === undefined ? {} : { endpoint }),
      ...(accessKeyId === undefined || secretAccessKey === undefined ? {} : { credentials: { accessKeyId, secretAccessKey } }),
    });
    closers.push(() => Promise.resolve(client.destroy()));
    return Promise.resolve({
      client,
      table,
      ...(prefix === undefined ? {} : { prefix }),
      ...(checkResourceFence === undefined ? {} : { checkResourceFence }),
    });
  },

  create: (options, timeoutMs) => new FencedDynamo(options.client, { ...options, timeoutMs: options.timeoutMs ?? timeoutMs }),

  /** DescribeTable: its answer says what is wrong (a missing table, credentials refused); no answer, the endpoint. Read-only. */
  check: (_store, { client, table }, timeoutMs) =>
    within(
      timeoutMs,
      (abortSignal) => client.send(new DescribeTableCommand({ TableName: table }), { abortSignal }),
      (err) => {
        const detail = message(err);
        const code = awsCode(err);
        const status = (err as { $metadata?: { httpStatusCode?: unknown } } | null)?.$metadata?.httpStatusCode;
        if (code === CREDENTIALS_PROVIDER_ERROR) return { state: "misconfigured", problem: "no-credentials", code, detail };
        if (code === "ResourceNotFoundException") return { state: "misconfigured", problem: "no-such-table", code, detail };
        if (status === 400 || status === 403) {
          if (code !== undefined && /AccessDenied|UnrecognizedClient|InvalidSignature|Forbidden/.test(code))
            return { state: "misconfigured", problem: "access-denied", code, detail };
        }
        if (typeof status === "number") return { state: "error", code: code ?? String(status), detail };
        const system = systemCode(err);
        return { state: system === "ECONNREFUSED" ? "refused" : "error", ...(system === undefined ? {} : { code: system }), detail };
      },
    ),
};
