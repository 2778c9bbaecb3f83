import { once } from "node:events";
import { createServer, type Server } from "node:http";
import { randomBytes } from "node:crypto";
import { DynamoDBClient, PutItemCommand } from "@aws-sdk/client-dynamodb";
import { startDynamo, type StartedDynamo } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { portSuite } from "../conditional/port-suite-test-support.js";
import { ConditionalItems } from "./items.js";

let dynamo: StartedDynamo;
let table: string;
beforeAll(async () => {
  dynamo = await startDynamo();
  table = await dynamo.createTable();
}, 60_000);
afterAll(() => dynamo?.stop());

describe("the conditional port on dynalite (ConditionalItems)", () => {
  portSuite(() => new ConditionalItems(dynamo.client(), table, 10_000));

  it("refuses a record past capabilities.maxRecordBytes as DynamoDB does, a fatal failure that writes nothing", async () => {
    const items = new ConditionalItems(dynamo.client(), table, 10_000);
    const key = `big/${randomBytes(8).toString("hex")}`;
    const outcome = await items.write(key, randomBytes(400 * 1024), { ifNoneMatch: true });
    expect(outcome.ok ? "landed" : outcome.failure).toBe("fatal");
    expect(await items.read(key)).toBeUndefined();
  });
});

/**
 * A server that answers every request as DynamoDB answers a failure it may retry, and counts them:
 * dynalite never throttles, nor fails inside. It stands in for DynamoDB's answer only; the request
 * it counts is the SDK's, as the adapter sends it.
 */
async function failingServer(status: number, type: string): Promise<{ server: Server; endpoint: string; requests: () => number }> {
  let requests = 0;
  const server = createServer((req, res) => {
    requests++;
    req.resume();
    req.on("end", () => {
      res.writeHead(status, { "content-type": "application/x-amz-json-1.0", "x-amzn-errortype": type });
      res.end(JSON.stringify({ __type: `com.amazonaws.dynamodb.v20120810#${type}`, message: "answered by the test" }));
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as { port: number };
  return { server, endpoint: `http://127.0.0.1:${port}`, requests: () => requests };
}

describe("a conditional write goes to DynamoDB once: the SDK never resends it", () => {
  for (const [status, type, failure] of [
    [500, "InternalServerError", "ambiguous"],
    [400, "ProvisionedThroughputExceededException", "throttled"],
    [400, "ThrottlingException", "throttled"],
  ] as const) {
    it(`${status} ${type}: one request, understood as ${failure}; the same PutItem sent plainly is retried`, async () => {
      const { server, endpoint, requests } = await failingServer(status, type);
      const client = new DynamoDBClient({
        endpoint,
        region: "us-east-1",
        credentials: { accessKeyId: "a", secretAccessKey: "b" },
        maxAttempts: 3,
      });
      try {
        const items = new ConditionalItems(client, "t", 10_000);
        const outcome = await items.write("k", Buffer.from("v"), { ifNoneMatch: true });
        expect(outcome.ok ? "landed" : outcome.failure).toBe(failure);
        expect(requests()).toBe(1);
        // The condition of the test: the SDK resends this answer on its own.
        const plain = new PutItemCommand({
          TableName: "t",
          Item: { key: { S: "k" } },
          ConditionExpression: "attribute_not_exists(#k)",
          ExpressionAttributeNames: { "#k": "key" },
        });
        await expect(client.send(plain)).rejects.toThrow();
        expect(requests()).toBe(1 + 3);
      } finally {
        client.destroy();
        server.close();
      }
    });
  }
});

describe("faults of the DynamoDB process", () => {
  /** Measured: a write to dynalite alone answers in a few ms; a paused one is given this long. */
  const DEADLINE_MS = 500;

  it("a paused server: the write ends at its deadline as ambiguous; once resumed, the record is as the write left it or as before", async () => {
    const items = new ConditionalItems(dynamo.client(), table, 10_000);
    const key = `paused/${randomBytes(8).toString("hex")}`;
    const before = await items.write(key, Buffer.from("before"), { ifNoneMatch: true });
    if (!before.ok) throw before.error;
    dynamo.faults.pause();
    try {
      const started = performance.now();
      const outcome = await items.write(key, Buffer.from("during"), { ifMatch: before.etag }, AbortSignal.timeout(DEADLINE_MS));
      expect(outcome.ok ? "landed" : outcome.failure).toBe("ambiguous");
      expect(performance.now() - started).toBeLessThan(DEADLINE_MS * 4);
    } finally {
      dynamo.faults.resume();
    }
    const now = await items.read(key);
    expect(["before", "during"]).toContain(now?.body.toString());
  });

  it("a killed server: the write fails as unsent or ambiguous, never landed; restarted, the record is there as it was", async () => {
    const items = new ConditionalItems(dynamo.client(), table, 10_000);
    const key = `killed/${randomBytes(8).toString("hex")}`;
    const before = await items.write(key, Buffer.from("before"), { ifNoneMatch: true });
    if (!before.ok) throw before.error;
    await dynamo.faults.kill();
    try {
      const outcome = await items.write(key, Buffer.from("during"), { ifMatch: before.etag }, AbortSignal.timeout(DEADLINE_MS));
      expect(outcome.ok ? "landed" : outcome.failure).toMatch(/^(unsent|ambiguous)$/);
    } finally {
      await dynamo.faults.restart();
    }
    expect(await items.read(key)).toEqual({ etag: before.etag, body: Buffer.from("before") });
  });
});
