import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { startDynamo, type StartedDynamo } from "@fenced/servers";
import { afterAll, beforeAll } from "vitest";
import { decodeManifest, type ManifestHeader } from "../cas/manifest.js";
import { writersProperty } from "../cas/writers-property-test-support.js";
import { FencedDynamo } from "./store.js";

/**
 * FencedDynamo under random concurrent interleavings on dynalite: the property of every store of the
 * object algorithm (../cas/writers-property-test-support.ts), on the history of every manifest item
 * a conditional PutItem wrote, seen by a middleware of the stores' client.
 */
let dynamo: StartedDynamo;
let client: DynamoDBClient;
let table: string;
/** Every manifest item a conditional PutItem wrote, as the client saw the write succeed. */
const accepted: ManifestHeader[] = [];

beforeAll(async () => {
  dynamo = await startDynamo();
  client = dynamo.client();
  client.middlewareStack.add(
    (next) => async (args) => {
      const out = await next(args);
      const input = args.input as { Item?: { key?: { S?: string }; body?: { B?: Uint8Array } }; ConditionExpression?: string };
      const name = input.Item?.key?.S ?? "";
      if (input.ConditionExpression !== undefined && input.Item?.body?.B !== undefined && name.includes("/manifests/")) {
        accepted.push(decodeManifest(name.replace(/^.*?\/manifests\//, ""), Buffer.from(input.Item.body.B), "dynamodb").header);
      }
      return out;
    },
    { step: "initialize", name: "auditManifests" },
  );
  table = await dynamo.createTable();
}, 60_000);
afterAll(() => dynamo?.stop());

writersProperty(
  "FencedDynamo under random concurrent interleavings",
  (o) => new FencedDynamo(client, { table, ...o }),
  (i) => ({ writer: i }),
  accepted,
);
