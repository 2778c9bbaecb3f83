// Shared by the gateway's tests (not part of the published build: see tsconfig.build.json).
import { Agent, request as httpRequest } from "node:http";
import { Readable } from "node:stream";
import type { S3Client } from "@aws-sdk/client-s3";
import { Redis } from "ioredis";
import pg from "pg";
import { pino } from "pino";
import { afterAll, beforeAll } from "vitest";
import { ANSWERING_NODE_TIMEOUT_MS, startPostgres, startRedisNodes, startS3, type RedisNodes, type StartedS3 } from "@fenced/servers";
import { createGateway, type Gateway, type GatewayOptions } from "./index.js";
import type { CredentialKey } from "@fenced/fence/credentials";
import type { ApiKeyConfig } from "./auth/api-keys.js";
import { exchangeChecker, type ExchangeCheck } from "./openapi-test-support.js";
import { serve, type Serving } from "./http/server.js";

/** Keys the tests authenticate with: everything, one team's prefixes, and read-only. */
export const KEYS = {
  admin: "admin-key-0123456789abcdef",
  teamA: "team-a-key-0123456789abcdef",
  reader: "reader-key-0123456789abcdef",
  service: "service-key-0123456789abcdef",
} as const;

/** Fence credential keys of the test gateways: "current" signs, "previous" still verifies. */
export const FENCE_KEYS: readonly CredentialKey[] = [
  { id: "current", secret: Buffer.alloc(32, 7) },
  { id: "previous", secret: Buffer.alloc(32, 9) },
];

export const API_KEYS: ApiKeyConfig[] = [
  // Trusted lock clients: they may write with plain Fencing-Token headers (most tests exercise the stores through them).
  { id: "admin", key: KEYS.admin, resources: [""], keys: [""], trustedLockClient: true },
  { id: "team-a", key: KEYS.teamA, resources: ["team-a/"], keys: ["team-a/"], trustedLockClient: true },
  // An ordinary client: it writes only with the credential of a lease.
  { id: "service", key: KEYS.service, resources: ["svc/"], keys: ["svc/"] },
  { id: "reader", key: KEYS.reader, resources: [""], keys: [""], readOnly: true },
];

export const bearer = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}` });

/** The PostgreSQL schema of options whose records are on PostgreSQL. */
export function recordsSchema(options: GatewayOptions): string | undefined {
  const { records } = options;
  return records !== undefined && "pool" in records ? records.schema : undefined;
}

export interface Backends {
  readonly pool: pg.Pool | undefined;
  readonly s3: StartedS3 | undefined;
  readonly s3Client: S3Client | undefined;
  readonly bucket: string | undefined;
  readonly redis: RedisNodes | undefined;
  readonly redisClients: Redis[];
  /** Options for createGateway over these backends: records on PostgreSQL, objects on S3. */
  gatewayOptions(extra?: Partial<GatewayOptions>): GatewayOptions;
  stop(): Promise<void>;
}

/** Real servers, each only if asked for: tests that need no lock start no Redis. */
export async function startBackends(want: {
  redis?: number;
  redisFaults?: boolean;
  postgres?: boolean;
  /** The PostgreSQL pool's size (default 24). */
  poolMax?: number;
  s3?: boolean;
}): Promise<Backends> {
  const [postgres, s3, redis] = await Promise.all([
    want.postgres === true ? startPostgres() : Promise.resolve(undefined),
    want.s3 === true ? startS3() : Promise.resolve(undefined),
    want.redis === undefined ? Promise.resolve(undefined) : startRedisNodes(want.redis, { faults: want.redisFaults ?? false }),
  ]);
  const pool = postgres === undefined ? undefined : new pg.Pool({ connectionString: postgres.url, max: want.poolMax ?? 24 });
  // Idle connections see the server go away at the end of a file; that is not a test failure.
  pool?.on("error", () => undefined);
  const s3Client = s3?.client();
  const bucket = s3 === undefined ? undefined : await s3.createBucket();
  const redisClients = (redis?.urls ?? []).map((url) => {
    const client = new Redis(url);
    client.on("error", () => undefined); // tests that stop a node look at the answers, not at these events
    return client;
  });
  return {
    pool,
    s3,
    s3Client,
    bucket,
    redis,
    redisClients,
    gatewayOptions(extra = {}) {
      return {
        apiKeys: API_KEYS,
        fenceKeys: FENCE_KEYS,
        logger: pino({ level: "silent" }),
        defaultMetrics: false,
        // On, as deployed, but never the reason a test's request is refused: tests of admission control set their own.
        admission: { queueLength: 100_000, queueTimeoutMs: 600_000, maxEventLoopDelayMs: 600_000 },
        ...(pool === undefined ? {} : { records: { pool, schema: `gw_${Math.random().toString(36).slice(2, 10)}` } }),
        ...(s3Client === undefined || bucket === undefined
          ? {}
          : { objects: { client: s3Client, bucket, prefix: `gw-${Math.random().toString(36).slice(2, 10)}/` } }),
        // A lease these tests ask for means a grant or a refusal, never the timeout of a node that is up (a busy machine).
        ...(redisClients.length === 0
          ? {}
          : {
              leases: {
                clients: redisClients,
                redlock: { nodeTimeoutMs: ANSWERING_NODE_TIMEOUT_MS },
                acquireTimeoutMs: 3 * ANSWERING_NODE_TIMEOUT_MS,
              },
            }),
        ...extra,
      };
    },
    async stop() {
      for (const c of redisClients) c.disconnect();
      await Promise.allSettled([pool?.end(), s3?.stop(), redis?.stop(), postgres?.stop()]);
    },
  };
}

export interface RunningGateway {
  readonly gateway: Gateway;
  readonly serving: Serving;
  readonly client: HttpClient;
  close(): Promise<void>;
}

export async function runGateway(options: GatewayOptions): Promise<RunningGateway> {
  const gateway = createGateway(options);
  await gateway.prepare();
  const serving = await serve(gateway.app, { port: 0 });
  const client = httpClient(serving.port);
  return {
    gateway,
    serving,
    client,
    async close() {
      client.close();
      await serving.drain(2_000);
      gateway.close();
    },
  };
}

/**
 * One gateway over real backends for a whole test file: started before its tests, stopped after.
 * `state()` reads PostgreSQL and S3 directly, so a test can show that a refusal wrote nothing.
 */
export interface GatewayFixture {
  readonly backends: Backends;
  readonly gw: RunningGateway;
  /** The records' PostgreSQL schema, when the gateway serves records. */
  readonly schema: string | undefined;
  state(): Promise<string>;
}

export function useGateway(want: Parameters<typeof startBackends>[0]): GatewayFixture {
  let backends: Backends | undefined;
  let gw: RunningGateway | undefined;
  let schema: string | undefined;
  beforeAll(async () => {
    backends = await startBackends(want);
    const options = backends.gatewayOptions();
    schema = recordsSchema(options);
    gw = await runGateway(options);
  });
  afterAll(async () => {
    await gw?.close();
    await backends?.stop();
  });
  const started = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error("the gateway fixture is used before its beforeAll ran");
    return value;
  };
  return {
    get backends() {
      return started(backends);
    },
    get gw() {
      return started(gw);
    },
    get schema() {
      return schema;
    },
    state: () => snapshot(backends?.pool, schema, backends?.s3Client, backends?.bucket),
  };
}

export interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Buffer;
  json<T = Record<string, unknown>>(): T;
  text(): string;
}

interface Ask {
  readonly method: string;
  /** Sent verbatim: no normalisation of '..' or '//' on the way, as a hostile client would send it. */
  readonly path: string;
  readonly headers?: Record<string, string | number | string[]>;
  readonly body?: string | Buffer | Readable | undefined;
}

export interface HttpClient {
  readonly port: number;
  send(ask: Ask): Promise<Answer>;
  /** JSON body with Content-Type application/json. */
  json(method: string, path: string, body: unknown, headers?: Record<string, string>): Promise<Answer>;
  close(): void;
}

// One checker for every client: its compiled schemas are shared.
let documentCheck: ExchangeCheck | undefined;

/**
 * Keep-alive HTTP/1.1 over node:http: connections are reused, so thousands of requests cost no handshakes.
 * Every answer is checked against the API document (openapi/): an answer it does not describe —
 * an undocumented status, a missing header, a body of another shape — rejects send() with ApiMismatchError.
 */
export function httpClient(port: number, maxSockets = 64, timeoutMs = 15_000): HttpClient {
  const agent = new Agent({ keepAlive: true, maxSockets });
  const check = (documentCheck ??= exchangeChecker());
  const send = (ask: Ask): Promise<Answer> =>
    new Promise((resolve, reject) => {
      const headers: Record<string, string | number | string[]> = { ...ask.headers };
      // Node sends a DELETE's body without a length (and means to close the connection after it): say how long it is.
      if (
        (typeof ask.body === "string" || Buffer.isBuffer(ask.body)) &&
        !Object.keys(headers).some((h) => h.toLowerCase() === "content-length")
      ) {
        headers["content-length"] = Buffer.byteLength(ask.body);
      }
      const req = httpRequest({ host: "127.0.0.1", port, method: ask.method, path: ask.path, headers, agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", reject);
        res.on("end", () => {
          const body = Buffer.concat(chunks);
          try {
            check({ method: ask.method, path: ask.path, status: res.statusCode ?? 0, headers: res.headers, body });
          } catch (err) {
            reject(err instanceof Error ? err : new Error(String(err)));
            return;
          }
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body,
            json: <T>() => JSON.parse(body.toString("utf8")) as T,
            text: () => body.toString("utf8"),
          });
        });
      });
      // A request the gateway never answers is a failure of its own, named, rather than a test timeout.
      req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms: ${ask.method} ${ask.path.slice(0, 200)}`)));
      req.on("error", reject);
      const body = ask.body;
      if (body instanceof Readable) body.pipe(req);
      else req.end(body);
    });
  return {
    port,
    send,
    json: (method, path, body, headers = {}) =>
      send({ method, path, headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) }),
    close: () => agent.destroy(),
  };
}

/** A write's headers: key, token and optionally resource/If-Match. */
export function writeHeaders(key: string, token: bigint | string, extra: Record<string, string> = {}): Record<string, string> {
  return { ...bearer(key), "fencing-token": String(token), ...extra };
}

/** A snapshot of everything the gateway's stores hold: what "nothing was written" is compared against. */
export async function snapshot(
  pool: pg.Pool | undefined,
  schema: string | undefined,
  s3: S3Client | undefined,
  bucket: string | undefined,
): Promise<string> {
  const parts: string[] = [];
  if (pool !== undefined && schema !== undefined) {
    // Every column, whatever the tables hold: a refused write must change none of them.
    const fence = await pool.query(`SELECT to_jsonb(f)::text AS row FROM "${schema}".fence f ORDER BY resource`);
    const records = await pool.query(`SELECT to_jsonb(r)::text AS row FROM "${schema}".records r ORDER BY key`);
    parts.push(JSON.stringify(fence.rows), JSON.stringify(records.rows));
  }
  if (s3 !== undefined && bucket !== undefined) {
    const { ListObjectsV2Command } = await import("@aws-sdk/client-s3");
    let token: string | undefined;
    do {
      const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, ContinuationToken: token }));
      for (const o of page.Contents ?? []) parts.push(`${o.Key ?? ""} ${o.ETag ?? ""} ${o.Size ?? ""}`);
      token = page.NextContinuationToken;
    } while (token !== undefined);
  }
  return parts.join("\n");
}
