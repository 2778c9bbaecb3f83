import { request } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { ListMultipartUploadsCommand, ListObjectsV2Command, ListPartsCommand, type S3Client } from "@aws-sdk/client-s3";
import { startPostgres, startRedisNodes, startS3, type RedisNodes, type StartedPostgres, type StartedS3 } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startCli, type Child } from "./cli-test-support.js";
import { bearer, httpClient, KEYS, type HttpClient } from "./test-support.js";

/**
 * One deployment, two gateway processes: the same five Redis nodes, one PostgreSQL, one bucket and
 * prefix, the same API and fence keys. Nothing a client does may depend on which instance it reaches:
 * a lease taken on one is extended and released on the other, writes alternate, a credential signed
 * by one is accepted by the other. One is killed (SIGKILL) in the middle of a large chunked upload;
 * the other goes on serving, and the sweeper, run with the same configuration, reclaims what the
 * dead one left.
 */

const API_KEYS = JSON.stringify([
  { id: "service", key: KEYS.service, resources: ["svc/"], keys: ["svc/"] },
  { id: "admin", key: KEYS.admin, resources: [""], keys: [""], trustedLockClient: true },
]);
const FENCE_KEYS = JSON.stringify([{ id: "shared", secret: Buffer.alloc(32, 5).toString("base64") }]);
const PREFIX = "deployment/";
const MiB = 1024 * 1024;

let redis: RedisNodes;
let postgres: StartedPostgres;
let s3: StartedS3;
let s3Client: S3Client;
let bucket: string;
let env: Record<string, string>;
const children: Child[] = [];

interface Instance {
  readonly child: Child;
  readonly client: HttpClient;
  readonly port: number;
}

async function startInstance(): Promise<Instance> {
  const child = startCli([], env);
  children.push(child);
  const listening = await child.waitFor("listening");
  const port = Number(listening.port);
  return { child, client: httpClient(port), port };
}

interface LeaseAnswer {
  readonly resource: string;
  readonly token: string;
  readonly leaseId: string;
  readonly fence: string;
}

const service = bearer(KEYS.service);

async function lease(gw: Instance, resource: string, ttlMs: number): Promise<LeaseAnswer> {
  const res = await gw.client.json("POST", "/v1/leases", { resource, ttlMs }, service);
  expect(res.status, res.text()).toBe(201);
  return res.json<LeaseAnswer>();
}

async function putRecord(gw: Instance, key: string, value: unknown, fence: string): Promise<{ status: number; text: string }> {
  const res = await gw.client.json("PUT", `/v1/records/${key}`, value, { ...service, "fencing-credential": fence });
  return { status: res.status, text: res.text() };
}

/** What is under the prefix: data objects (count, bytes) and incomplete multipart uploads (count, bytes in their parts). */
async function storage(): Promise<{ dataObjects: number; dataBytes: number; uploads: number; uploadBytes: number }> {
  let dataObjects = 0;
  let dataBytes = 0;
  let token: string | undefined;
  do {
    const page = await s3Client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: `${PREFIX}data/`, ContinuationToken: token }));
    for (const o of page.Contents ?? []) {
      dataObjects++;
      dataBytes += o.Size ?? 0;
    }
    token = page.NextContinuationToken;
  } while (token !== undefined);
  const listed = await s3Client.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: PREFIX }));
  let uploadBytes = 0;
  for (const u of listed.Uploads ?? []) {
    const parts = await s3Client.send(new ListPartsCommand({ Bucket: bucket, Key: u.Key, UploadId: u.UploadId }));
    for (const p of parts.Parts ?? []) uploadBytes += p.Size ?? 0;
  }
  return { dataObjects, dataBytes, uploads: listed.Uploads?.length ?? 0, uploadBytes };
}

beforeAll(async () => {
  [redis, postgres, s3] = await Promise.all([startRedisNodes(5), startPostgres(), startS3()]);
  s3Client = s3.client();
  bucket = await s3.createBucket();
  env = {
    NODE_NO_WARNINGS: "1",
    FENCED_GATEWAY_LOG_LEVEL: "info",
    FENCED_GATEWAY_PORT: "0",
    FENCED_GATEWAY_API_KEYS: API_KEYS,
    FENCED_GATEWAY_FENCE_KEYS: FENCE_KEYS,
    FENCED_GATEWAY_REDIS_URLS: redis.urls.join(","),
    FENCED_GATEWAY_POSTGRES_URL: postgres.url,
    FENCED_GATEWAY_POSTGRES_SCHEMA: "deployment",
    FENCED_GATEWAY_S3_ENDPOINT: s3.endpoint,
    FENCED_GATEWAY_S3_REGION: s3.region,
    FENCED_GATEWAY_S3_BUCKET: bucket,
    FENCED_GATEWAY_S3_PREFIX: PREFIX,
    FENCED_GATEWAY_S3_ACCESS_KEY_ID: s3.accessKeyId,
    FENCED_GATEWAY_S3_SECRET_ACCESS_KEY: s3.secretAccessKey,
  };
}, 120_000);

afterAll(async () => {
  for (const c of children) c.process.kill("SIGKILL");
  await Promise.allSettled([redis?.stop(), postgres?.stop(), s3?.stop()]);
});

describe("two gateway processes, one deployment", () => {
  it(
    "serve one lease and one store; one dies during a chunked upload, the other serves on, the sweeper reclaims its leftovers",
    { timeout: 120_000 },
    async () => {
      // One after the other: the first migrates the schema, the second finds it done.
      const a = await startInstance();
      const b = await startInstance();

      // A lease taken on A is extended on B: same token, a new credential B signed that A accepts.
      const first = await lease(a, "svc/ledger", 3_000);
      const extendedRes = await b.client.json("POST", "/v1/leases/extend", { leaseId: first.leaseId, ttlMs: 30_000 }, service);
      expect(extendedRes.status, extendedRes.text()).toBe(200);
      const extended = extendedRes.json<LeaseAnswer>();
      expect(extended.token).toBe(first.token);

      // Writes alternate between the instances, with either credential.
      for (let i = 0; i < 6; i++) {
        const gw = i % 2 === 0 ? a : b;
        const fence = i % 3 === 0 ? first.fence : extended.fence;
        const w = await putRecord(gw, "svc/ledger/balance", { i }, fence);
        expect(w.status, w.text).toBe(200);
      }
      for (const gw of [a, b]) {
        const read = await gw.client.send({ method: "GET", path: "/v1/records/svc/ledger/balance", headers: service });
        expect(read.json()).toEqual({ i: 5 });
      }

      // Released on B; the next lease (taken on B) is higher, and A refuses the old credential.
      expect((await b.client.json("POST", "/v1/leases/release", { leaseId: extended.leaseId }, service)).status).toBe(204);
      const second = await lease(b, "svc/ledger", 30_000);
      expect(BigInt(second.token)).toBeGreaterThan(BigInt(first.token));
      expect((await putRecord(a, "svc/ledger/balance", { i: 6 }, second.fence)).status).toBe(200);
      const stale = await putRecord(a, "svc/ledger/balance", { stale: true }, extended.fence);
      expect(stale.status, stale.text).toBe(409);

      // A large chunked upload to A: its multipart upload has parts in the bucket when A is killed.
      const big = await lease(a, "svc/blobs", 60_000);
      const upload = request({
        host: "127.0.0.1",
        port: a.port,
        method: "PUT",
        path: "/v1/objects/svc/blobs/large",
        headers: { ...service, "fencing-credential": big.fence, "content-type": "application/octet-stream" },
      });
      const cut = new Promise<void>((resolve) => {
        upload.on("error", () => resolve());
        upload.on("close", () => resolve());
      });
      const chunk = Buffer.alloc(MiB, 7);
      for (let sent = 0; sent < 24 * MiB; sent += MiB) {
        if (!upload.write(chunk)) await new Promise((resolve) => upload.once("drain", resolve));
      }
      let before = await storage();
      for (let i = 0; i < 100 && before.uploadBytes === 0; i++) {
        await sleep(100);
        before = await storage();
      }
      expect(before.uploads, JSON.stringify(before)).toBeGreaterThan(0);
      expect(before.uploadBytes).toBeGreaterThan(0);
      a.child.process.kill("SIGKILL");
      await a.child.exited;
      await cut;

      // B serves on: writes, reads, and the big lease (taken on A) is extended and used on B.
      expect((await putRecord(b, "svc/ledger/balance", { i: 7 }, second.fence)).status).toBe(200);
      const bigOnB = await b.client.json("POST", "/v1/leases/extend", { leaseId: big.leaseId, ttlMs: 30_000 }, service);
      expect(bigOnB.status, bigOnB.text()).toBe(200);
      // Too large to inline: a data object the manifest names, which the sweeper must keep.
      const afterKill = Buffer.alloc(MiB, 9);
      const small = await b.client.send({
        method: "PUT",
        path: "/v1/objects/svc/blobs/large",
        headers: { ...service, "fencing-credential": bigOnB.json<LeaseAnswer>().fence, "content-type": "application/octet-stream" },
        body: afterKill,
      });
      expect(small.status, small.text()).toBe(200);

      // The sweeper, with the deployment's configuration, reclaims what A left; the store's bodies stay.
      const sweep = startCli(["sweep", "--min-age", "0"], { ...env, FENCED_GATEWAY_LOG_LEVEL: "warn" });
      children.push(sweep);
      expect(await sweep.exited, sweep.stderr()).toBe(0);
      const after = await storage();
      console.log(JSON.stringify({ twoGateways: { before, after, sweep: sweep.lines.at(-1) } }));
      const report = sweep.lines.at(-1) as {
        s3?: { uploads: { aborted: number }; kept: { objects: number }; deleted: { objects: number } };
      };
      expect(report.s3?.uploads.aborted).toBe(before.uploads);
      expect(report.s3?.kept.objects).toBe(1);
      expect(after.uploads).toBe(0);
      expect(after.uploadBytes).toBe(0);
      expect(after.dataObjects).toBe(1);
      const read = await b.client.send({ method: "GET", path: "/v1/objects/svc/blobs/large", headers: service });
      expect(read.body.equals(afterKill), "B's body reads back whole").toBe(true);
      const record = await b.client.send({ method: "GET", path: "/v1/records/svc/ledger/balance", headers: service });
      expect(record.json()).toEqual({ i: 7 });
    },
  );
});
