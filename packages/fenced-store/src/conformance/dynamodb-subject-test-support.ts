import { DynamoDBClient, ScanCommand } from "@aws-sdk/client-dynamodb";
import { freePort, startDynamo } from "@fenced/servers";
import type { StoredRecord } from "../contract.js";
import { FencedDynamo } from "../dynamodb/store.js";
import type { Subject } from "./subject-test-support.js";

/** Every item of the table, by key, its etag and body: what the store keeps. */
async function contents(client: DynamoDBClient, table: string): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  let start: Record<string, never> | undefined;
  do {
    const page = await client.send(new ScanCommand({ TableName: table, ConsistentRead: true, ExclusiveStartKey: start }));
    for (const item of page.Items ?? [])
      out[item.key?.S ?? ""] = { etag: item.etag?.S, body: Buffer.from(item.body?.B ?? []).toString("base64") };
    start = page.LastEvaluatedKey as Record<string, never> | undefined;
  } while (start !== undefined);
  return out;
}

/** FencedDynamo on dynalite: a table per open(); a client of a port nothing listens on for unreachable(). */
export async function dynamoSubject(): Promise<Subject<unknown, StoredRecord>> {
  const dynamo = await startDynamo();
  const client = dynamo.client();
  return {
    async open() {
      const table = await dynamo.createTable();
      return {
        store: new FencedDynamo(client, { table }),
        again: new FencedDynamo(dynamo.client(), { table }),
        state: () => contents(client, table),
      };
    },
    async unreachable() {
      const port = await freePort();
      const refusing = new DynamoDBClient({
        endpoint: `http://127.0.0.1:${port}`,
        region: dynamo.region,
        credentials: { accessKeyId: dynamo.accessKeyId, secretAccessKey: dynamo.secretAccessKey },
        maxAttempts: 1,
      });
      let tries = 0;
      // Every request the client is asked to send, the store's own conditional writes included.
      refusing.middlewareStack.add((next) => (args) => (tries++, next(args)), { step: "initialize", name: "countTries" });
      return { store: new FencedDynamo(refusing, { table: "nowhere", timeoutMs: 2_000 }), tries: () => tries };
    },
    value: (text) => ({ text }),
    text: (read) => Promise.resolve((read.value as { text: string }).text),
    stop: () => dynamo.stop(),
  };
}
