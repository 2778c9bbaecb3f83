// A client in another language: article_scenario.py (Python 3, standard library only) runs the
// scenario of "How to do distributed locking" against a real gateway — three Redis nodes, PostgreSQL
// and S3 — with an ordinary API key, which can write only with the fence credential of a lease.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Redis } from "ioredis";
import pg from "pg";
import { createGateway, serve, type Gateway, type Serving } from "@fenced/gateway";
import { findExecutable, startPostgres, startRedisNodes, startS3, type RedisNodes, type StartedPostgres, type StartedS3 } from "@fenced/servers";
import { FencedPostgres } from "@fenced/store/postgres";
import { FencedS3 } from "@fenced/store/s3";

const SCRIPT = fileURLToPath(new URL("./article_scenario.py", import.meta.url));
const API_KEY = randomBytes(24).toString("base64url");
const SCHEMA = "python_client";
const PREFIX = "python-client/";
const TTL_MS = 1_000;

let python: string;
let nodes: RedisNodes;
let postgres: StartedPostgres;
let s3: StartedS3;
let redisClients: Redis[];
let pool: pg.Pool;
let bucket: string;
let gateway: Gateway;
let serving: Serving;

beforeAll(async () => {
  // A missing interpreter fails the file, saying what to install; it is never skipped.
  const found = findExecutable("python3");
  if (found === undefined) throw new Error("python3 is not on PATH: this test runs a Python client. Install Python 3 (Debian/Ubuntu: apt-get install python3); the script needs only its standard library");
  python = found;
  [nodes, postgres, s3] = await Promise.all([startRedisNodes(3), startPostgres(), startS3()]);
  redisClients = nodes.urls.map((url) => new Redis(url));
  pool = new pg.Pool({ connectionString: postgres.url, max: 4 });
  pool.on("error", () => undefined);
  bucket = await s3.createBucket();
  gateway = createGateway({
    // An ordinary key: not a trusted lock client, so its writes need a lease's Fencing-Credential.
    apiKeys: [{ id: "python", key: API_KEY, resources: ["articles/"], keys: ["articles/"] }],
    fenceKeys: [{ id: "k1", secret: randomBytes(32) }],
    records: { pool, schema: SCHEMA },
    objects: { client: s3.client(), bucket, prefix: PREFIX },
    leases: { clients: redisClients },
    // No logger given: the gateway's own (pino, JSON lines on stdout) logs the refused write at info.
    defaultMetrics: false,
  });
  await gateway.prepare();
  serving = await serve(gateway.app, { port: 0 });
});

afterAll(async () => {
  await serving?.drain(2_000);
  for (const c of redisClients ?? []) c.disconnect();
  await Promise.allSettled([pool?.end(), nodes?.stop(), postgres?.stop(), s3?.stop()]);
});

interface Step {
  readonly client?: string;
  readonly step: string;
  readonly status?: number;
  readonly token?: string;
  readonly etag?: string | null;
  readonly value?: unknown;
  readonly answer?: { readonly type?: string; readonly token?: string; readonly highest?: string; readonly version?: string };
  readonly ok?: boolean;
  readonly wrong?: readonly string[];
}

/** Runs the script for one store; resolves with its exit code and the JSON lines it printed. */
function runScript(store: "records" | "objects", resource: string, key: string): Promise<{ code: number | null; steps: Step[]; stderr: string }> {
  return new Promise((resolve, reject) => {
    const args = [SCRIPT, "--gateway", `http://127.0.0.1:${serving.port}`, "--store", store, "--resource", resource, "--key", key, "--ttl-ms", String(TTL_MS)];
    const child = spawn(python, args, { env: { ...process.env, FENCED_GATEWAY_KEY: API_KEY }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString("utf8")));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
    const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      try {
        resolve({ code, steps: stdout.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as Step), stderr });
      } catch (err) {
        reject(new Error(`the script printed something other than JSON lines: ${String(err)}\n${stdout}\n${stderr}`));
      }
    });
  });
}

const find = (steps: readonly Step[], client: string, step: string): Step[] => steps.filter((s) => s.client === client && s.step === step);

describe("a Python client (standard library only) through the gateway", () => {
  for (const store of ["records", "objects"] as const) {
    it(`${store}: client 1's write, delayed past its lease, is refused by the ratchet, a later one by its credential's end; client 2's data stays`, async () => {
      const resource = `articles/${store}-${randomBytes(4).toString("hex")}`;
      const key = `${resource}/draft ü.txt`;
      const { code, steps, stderr } = await runScript(store, resource, key);
      const transcript = `${steps.map((s) => JSON.stringify(s)).join("\n")}\n${stderr}`;
      expect(code, transcript).toBe(0);
      expect(steps.at(-1), transcript).toMatchObject({ step: "done", ok: true, wrong: [] });

      const [lease1] = find(steps, "client1", "lease");
      const [lease2] = find(steps, "client2", "lease");
      expect(lease1?.status).toBe(201);
      expect(lease2?.status).toBe(201);
      const token1 = BigInt(lease1?.token ?? "-1");
      const token2 = BigInt(lease2?.token ?? "-1");
      expect(token2).toBeGreaterThan(token1);

      const [read1] = find(steps, "client1", "read");
      const [read2, readBack] = find(steps, "client2", "read");
      expect(read1?.status).toBe(200);
      expect(read2?.etag).toBe(read1?.etag);
      const [write2] = find(steps, "client2", "write");
      const [sent1] = find(steps, "client1", "write sent");
      const [write1, late1] = find(steps, "client1", "write");
      expect(write2).toMatchObject({ status: 200, if_match: read1?.etag, answer: { token: token2.toString() } });
      // Client 1's write left before client 2's lease and arrived after client 2's write: it presented the
      // version it had read, still current when it read it, and a credential still valid when it left.
      // The ratchet refuses it first.
      expect(steps.indexOf(sent1 as Step)).toBeLessThan(steps.indexOf(lease2 as Step));
      expect(write1).toMatchObject({ status: 409, token: token1.toString(), if_match: read1?.etag, answer: { type: "/problems/stale-token", token: token1.toString(), highest: token2.toString() } });
      expect(steps.findIndex((s) => s.client === "client1" && s.step === "wake")).toBeGreaterThan(steps.indexOf(write2 as Step));
      // Written again after its lease: the credential has ended (nothing written either way).
      expect(late1).toMatchObject({ status: 403, answer: { type: "/problems/credential-expired", token: token1.toString() } });
      expect(readBack).toMatchObject({ status: 200, etag: `"${write2?.answer?.version ?? ""}"`, token: token2.toString() });

      // The stores themselves, read without the gateway: client 2's write, under client 2's token.
      const written = `written by client2`;
      if (store === "records") {
        const record = await new FencedPostgres(pool, { schema: SCHEMA }).get(key);
        expect(record).toMatchObject({ value: { article: key, text: written }, version: write2?.answer?.version, token: token2, resource });
      } else {
        const object = await new FencedS3(s3.client(), { bucket, prefix: PREFIX }).getBytes(key);
        expect(object?.body.toString("utf8")).toBe(`${written}\n`);
        expect(object).toMatchObject({ version: write2?.answer?.version, token: token2, resource, contentType: "text/plain; charset=utf-8" });
      }
    }, 60_000);
  }
});
