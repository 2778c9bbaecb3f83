import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAzureBlob, startDynamo, type StartedAzureBlob, type StartedDynamo } from "@fenced/servers";
import { mintFenceCredential, type CredentialKey } from "@fenced/fence/credentials";
import { API_KEYS, FENCE_KEYS, KEYS, bearer, runGateway, writeHeaders, type RunningGateway } from "./test-support.js";
import type { GatewayOptions } from "./app.js";
import { dynamoRecords } from "./stores/dynamodb.js";
import { azureBlobObjects } from "./stores/azure-blob.js";

/**
 * The gateway serving records from DynamoDB (dynalite) and objects from Azure Blob (azurite), each
 * chosen by the shape of its options (stores/registry.ts): the routes, readiness and fences answer
 * as with PostgreSQL and S3, a stale token is 409 on both, and POST /v1/records, which DynamoDB's
 * store cannot do all or none, is 501 `not-supported` with nothing written.
 */
let dynamo: StartedDynamo;
let azure: StartedAzureBlob;
let table: string;
let gw: RunningGateway;

function options(extra: Partial<GatewayOptions> = {}): GatewayOptions {
  return {
    apiKeys: API_KEYS,
    fenceKeys: FENCE_KEYS,
    logger: pino({ level: "silent" }),
    defaultMetrics: false,
    records: { client: dynamo.client(), table },
    objects: { container: azure.client().getContainerClient(container) },
    ...extra,
  };
}
let container: string;

beforeAll(async () => {
  [dynamo, azure] = await Promise.all([startDynamo(), startAzureBlob()]);
  [table, container] = await Promise.all([dynamo.createTable(), azure.createContainer()]);
  gw = await runGateway(options());
}, 90_000);
afterAll(async () => {
  await gw?.close();
  await Promise.all([dynamo?.stop(), azure?.stop()]);
});

const json = { "content-type": "application/json" };

describe("records on DynamoDB", () => {
  it("writes, reads, deletes; a stale token is 409 and changes nothing", async () => {
    const c = gw.client;
    const put = await c.send({
      method: "PUT",
      path: "/v1/records/docs/a",
      headers: { ...writeHeaders(KEYS.admin, 5n), ...json },
      body: '{"n":1}',
    });
    expect(put.status, put.text()).toBe(200);
    const stale = await c.send({
      method: "PUT",
      path: "/v1/records/docs/a",
      headers: { ...writeHeaders(KEYS.admin, 4n), ...json },
      body: '{"n":0}',
    });
    expect(stale.status).toBe(409);
    expect(stale.json()).toMatchObject({ type: expect.stringContaining("stale-token") as unknown, resource: "docs/a" });
    const read = await c.send({ method: "GET", path: "/v1/records/docs/a", headers: bearer(KEYS.admin) });
    expect([read.status, read.json(), read.headers["fencing-token"]]).toEqual([200, { n: 1 }, "5"]);
    const del = await c.send({ method: "DELETE", path: "/v1/records/docs/a", headers: writeHeaders(KEYS.admin, 5n) });
    expect(del.status).toBe(204);
    expect((await c.send({ method: "GET", path: "/v1/records/docs/a", headers: bearer(KEYS.admin) })).status).toBe(404);
  });

  it("POST /v1/records is 501 not-supported, naming DynamoDB, after the request's own checks; nothing is written", async () => {
    const c = gw.client;
    // A bad request is answered as on any store: the store's limit is no reason to skip a check.
    expect((await c.json("POST", "/v1/records", { writes: "none" }, bearer(KEYS.service))).status).toBe(400);
    const fence = mintFenceCredential({ resource: "svc/a", token: 3n, holder: "h" }, FENCE_KEYS[0] as CredentialKey, {
      expiresAt: Date.now() + 60_000,
    });
    const answer = await c.json("POST", "/v1/records", { fences: [fence], writes: [{ key: "svc/a/k", value: 1 }] }, bearer(KEYS.service));
    expect(answer.status, answer.text()).toBe(501);
    expect(answer.json()).toMatchObject({ type: expect.stringContaining("not-supported") as unknown, backend: "dynamodb" });
    expect((await c.send({ method: "GET", path: "/v1/records/svc/a/k", headers: bearer(KEYS.service) })).status).toBe(404);
  });

  it("readiness and fences name dynamodb and azure-blob, from their registrations", async () => {
    const ready = await gw.client.send({ method: "GET", path: "/readyz" });
    expect(ready.status, ready.text()).toBe(200);
    expect(ready.json<{ checks: Record<string, unknown> }>().checks).toMatchObject({
      dynamodb: { ok: true, state: "up" },
      "azure-blob": { ok: true, state: "up" },
    });
    await gw.client.send({ method: "PUT", path: "/v1/records/fenced/r", headers: { ...writeHeaders(KEYS.admin, 9n), ...json }, body: "1" });
    const fences = await gw.client.send({ method: "GET", path: "/v1/fences/fenced%2Fr", headers: bearer(KEYS.admin) });
    expect(fences.status, fences.text()).toBe(200);
    expect(fences.json()).toMatchObject({ stores: { dynamodb: { token: "9" } } });
  });
});

describe("objects on Azure Blob", () => {
  it("writes bytes with their content type, reads them back; a stale token is 409 and changes nothing", async () => {
    const c = gw.client;
    const body = Buffer.from("quarter,total\nq3,120\n");
    const put = await c.send({
      method: "PUT",
      path: "/v1/objects/reports/q3.csv",
      headers: { ...writeHeaders(KEYS.admin, 3n), "content-type": "text/csv" },
      body,
    });
    expect(put.status, put.text()).toBe(200);
    const stale = await c.send({
      method: "PUT",
      path: "/v1/objects/reports/q3.csv",
      headers: { ...writeHeaders(KEYS.admin, 2n), "content-type": "text/csv" },
      body: "old",
    });
    expect(stale.status).toBe(409);
    const read = await c.send({ method: "GET", path: "/v1/objects/reports/q3.csv", headers: bearer(KEYS.admin) });
    expect([read.status, read.body.toString(), read.headers["content-type"]]).toEqual([200, body.toString(), "text/csv"]);
  });

  it("a body over the store's maxBodyBytes is 413 before any I/O", async () => {
    const small = await runGateway(options({ objects: { container: azure.client().getContainerClient(container), maxBodyBytes: 16 } }));
    try {
      const answer = await small.client.send({
        method: "PUT",
        path: "/v1/objects/reports/big",
        headers: { ...writeHeaders(KEYS.admin, 1n), "content-type": "application/octet-stream" },
        body: Buffer.alloc(17),
      });
      expect(answer.status).toBe(413);
    } finally {
      await small.close();
    }
  });
});

describe("the stores from their configuration sections", () => {
  it("DynamoDB and Azure Blob sections make the options a gateway serves with", async () => {
    const closers: (() => Promise<unknown>)[] = [];
    const context = { storeTimeoutMs: 5_000, logger: pino({ level: "silent" }), closers };
    const credentials = { accessKeyId: dynamo.accessKeyId, secretAccessKey: dynamo.secretAccessKey };
    const records = await (
      await dynamoRecords.load()
    ).fromSection({ table, endpoint: dynamo.endpoint, region: dynamo.region, ...credentials }, context);
    const objects = await (await azureBlobObjects.load()).fromSection({ container, connectionString: azure.connectionString }, context);
    const configured = await runGateway(options({ records, objects }));
    try {
      const c = configured.client;
      const put = await c.send({
        method: "PUT",
        path: "/v1/records/conf/a",
        headers: { ...writeHeaders(KEYS.admin, 2n), ...json },
        body: "2",
      });
      expect(put.status, put.text()).toBe(200);
      const blob = await c.send({
        method: "PUT",
        path: "/v1/objects/conf/b",
        headers: { ...writeHeaders(KEYS.admin, 2n), "content-type": "text/plain" },
        body: "b",
      });
      expect(blob.status, blob.text()).toBe(200);
      expect((await gw.client.send({ method: "GET", path: "/v1/objects/conf/b", headers: bearer(KEYS.admin) })).body.toString()).toBe("b");
    } finally {
      await configured.close();
      await Promise.all(closers.map((close) => close()));
    }
  });
});

describe("choosing the store by its options", () => {
  it("options that are no store's are refused at createGateway, naming the family's stores", async () => {
    await expect(runGateway(options({ records: { client: dynamo.client() } as never }))).rejects.toThrow(
      /records: must be the options of exactly one of its stores \(PostgreSQL, DynamoDB\)/,
    );
    const both = { container: azure.client().getContainerClient(container), client: dynamo.client(), bucket: "b" };
    await expect(runGateway(options({ objects: both as never }))).rejects.toThrow(/objects: must be the options of exactly one/);
  });
});
