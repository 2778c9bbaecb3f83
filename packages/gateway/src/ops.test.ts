import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { pino } from "pino";
import { freePort } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGateway } from "./index.js";
import { type HealthReport } from "./app.js";
import { serve } from "./http/server.js";
import { bearer, httpClient, KEYS, runGateway, startBackends, writeHeaders, type Backends, type RunningGateway } from "./test-support.js";

/** /metrics and /healthz, against real backends, including ones that are down. */
let backends: Backends;
let gw: RunningGateway;

beforeAll(async () => {
  backends = await startBackends({ redis: 3, redisFaults: true, postgres: true, s3: true });
  // No check here waits out the health deadline (a stopped node is refused at once), and the backends that answer must do
  // so within it: 2 s, far above any answer, where a few hundred milliseconds can be missed on a busy machine.
  gw = await runGateway(backends.gatewayOptions({ defaultMetrics: true, healthTimeoutMs: 2_000 }));
});
afterAll(async () => {
  await gw?.close();
  await backends?.stop();
});

/** The value of one series in Prometheus' text format, or undefined. */
function series(text: string, name: string, labels: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{${labels}} `));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(" ") + 1));
}

const json = { "content-type": "application/json" };

describe("/metrics", () => {
  it("counts accepted and rejected writes by reason, store latency, requests and leases", async () => {
    const c = gw.client;
    for (let i = 0; i < 3; i++)
      expect(
        (await c.send({ method: "PUT", path: "/v1/records/m/a", headers: { ...writeHeaders(KEYS.admin, 5n), ...json }, body: "1" })).status,
      ).toBe(200);
    expect(
      (await c.send({ method: "PUT", path: "/v1/records/m/a", headers: { ...writeHeaders(KEYS.admin, 4n), ...json }, body: "1" })).status,
    ).toBe(409);
    expect(
      (await c.send({ method: "PUT", path: "/v1/records/m/a", headers: { ...writeHeaders(KEYS.admin, "-4"), ...json }, body: "1" })).status,
    ).toBe(400);
    expect((await c.send({ method: "PUT", path: "/v1/records/m/a", headers: { "fencing-token": "5", ...json }, body: "1" })).status).toBe(
      401,
    );
    expect((await c.send({ method: "DELETE", path: "/v1/objects/m/b", headers: writeHeaders(KEYS.admin, 1n) })).status).toBe(204);
    const lease = await c.json("POST", "/v1/leases", { resource: "m/lease", ttlMs: 1_000 }, bearer(KEYS.admin));
    expect(lease.status).toBe(201);
    // Released, then extended: a majority answers that it no longer holds the lease.
    const { leaseId } = lease.json<{ leaseId: string }>();
    expect((await c.json("POST", "/v1/leases/release", { leaseId }, bearer(KEYS.admin))).status).toBe(204);
    expect((await c.json("POST", "/v1/leases/extend", { leaseId, ttlMs: 1_000 }, bearer(KEYS.admin))).status).toBe(409);
    await sleep(20); // each request is counted when its response has closed

    const res = await c.send({ method: "GET", path: "/metrics" });
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = res.text();
    expect(series(text, "fenced_gateway_writes_accepted_total", 'store="records",op="put"')).toBe(3);
    expect(series(text, "fenced_gateway_writes_accepted_total", 'store="objects",op="delete"')).toBe(1);
    expect(series(text, "fenced_gateway_writes_rejected_total", 'store="records",op="put",reason="stale_token"')).toBe(1);
    expect(series(text, "fenced_gateway_writes_rejected_total", 'store="records",op="put",reason="invalid_request"')).toBe(1);
    expect(series(text, "fenced_gateway_writes_rejected_total", 'store="records",op="put",reason="unauthorized"')).toBe(1);
    // The store saw the four writes that passed validation, not the two refused at the door.
    expect(series(text, "fenced_gateway_store_duration_seconds_count", 'store="records",op="put",outcome="ok"')).toBe(3);
    expect(series(text, "fenced_gateway_store_duration_seconds_count", 'store="records",op="put",outcome="stale_token"')).toBe(1);
    expect(series(text, "fenced_gateway_request_duration_seconds_count", 'route="records",method="PUT",status="200"')).toBe(3);
    expect(series(text, "fenced_gateway_request_duration_seconds_bucket", 'le="+Inf",route="records",method="PUT",status="409"')).toBe(1);
    expect(series(text, "fenced_gateway_leases_total", 'event="granted"')).toBe(1);
    expect(series(text, "fenced_gateway_leases_lost_total", 'kind="quorum-lost"')).toBe(1);
    expect(text).toMatch(/^fenced_gateway_process_resident_memory_bytes \d+/m);
    // No key, resource or API key id ever becomes a label.
    expect(text).not.toMatch(/m\/a|m\/lease|admin/);
  });
});

describe("secrets", () => {
  it("lease ids and fence credentials never appear in logs, metric labels or response headers", async () => {
    const lines: string[] = [];
    const logger = pino({ level: "trace" }, { write: (line: string) => void lines.push(line) });
    // A records backend whose pool points nowhere: its writes fail inside the gateway (5xx, logged at error).
    const broken = new pg.Pool({ connectionString: `postgres://nobody@127.0.0.1:${await freePort()}/none`, connectionTimeoutMillis: 200 });
    broken.on("error", () => undefined);
    const options = backends.gatewayOptions({ logger, defaultMetrics: false });
    const gateway = createGateway({ ...options, records: { pool: broken, schema: "secrets" } });
    const serving = await serve(gateway.app, { port: 0 });
    const c = httpClient(serving.port);
    try {
      const granted = await c.json("POST", "/v1/leases", { resource: "svc/secret", ttlMs: 5_000 }, bearer(KEYS.service));
      expect(granted.status).toBe(201);
      const { leaseId, fence } = granted.json<{ leaseId: string; fence: string }>();
      // The lease's value on the lock nodes, sealed inside the id (its second field).
      const value = Buffer.from(leaseId.split(".")[2] as string, "base64url")
        .toString("utf8")
        .split("\n")[1] as string;
      expect(value).toMatch(/^[0-9a-f]{32}$/);
      const secrets = [leaseId, fence, value];
      const answers = [
        granted,
        await c.json("POST", "/v1/leases/extend", { leaseId, ttlMs: 5_000 }, bearer(KEYS.service)),
        await c.send({
          method: "PUT",
          path: "/v1/records/svc/x",
          headers: { ...bearer(KEYS.service), ...json, "fencing-credential": fence },
          body: "1",
        }),
        await c.send({
          method: "PUT",
          path: "/v1/objects/svc/x",
          headers: { ...bearer(KEYS.service), "fencing-credential": `${fence}x` },
          body: "1",
        }),
        await c.json("POST", "/v1/leases/release", { leaseId }, bearer(KEYS.service)),
        await c.json("POST", "/v1/leases/extend", { leaseId, ttlMs: 5_000 }, bearer(KEYS.service)),
      ];
      expect(answers.map((a) => a.status)).toEqual([201, 200, 503, 400, 204, 409]);
      // Each refusal's log line names its problem as its `type` does: one slug (kinds.ts, outcomeNames).
      // A request's line is written once its response has closed, which can follow the answer: awaited.
      const logged = (): string[] =>
        lines
          .map((line) => JSON.parse(line) as { msg?: string; problem?: string })
          .flatMap((l) => (l.msg === "request" && l.problem !== undefined ? [`/problems/${l.problem}`] : []));
      await expect
        .poll(logged, { timeout: 5_000 })
        .toEqual(answers.filter((a) => a.status >= 400).map((a) => a.json<{ type: string }>().type));
      expect(logged()).toContain("/problems/lease-lost");
      const metrics = await c.send({ method: "GET", path: "/metrics" });
      expect(lines.length).toBeGreaterThan(answers.length);
      for (const secret of secrets) {
        for (const line of lines) expect(line).not.toContain(secret);
        expect(metrics.text()).not.toContain(secret);
        for (const a of answers) expect(JSON.stringify(a.headers)).not.toContain(secret);
      }
    } finally {
      c.close();
      await serving.drain(1_000);
      await broken.end();
    }
  });
});

describe("/healthz", () => {
  type Report = HealthReport;

  it("200 with every backend's check while all answer", async () => {
    const res = await gw.client.send({ method: "GET", path: "/healthz" });
    expect(res.status).toBe(200);
    expect(res.json<Report>()).toMatchObject({
      status: "ok",
      checks: {
        postgres: { ok: true, state: "up" },
        s3: { ok: true, state: "up" },
        redis: { ok: true, quorum: 2, nodes: [{ ok: true }, { ok: true }, { ok: true }] },
      },
    });
  });

  it("degraded (200: the other backends serve) naming Postgres when it does not answer; its writes are 503, never 500", async () => {
    const dead = new pg.Pool({ connectionString: `postgres://nobody@127.0.0.1:${await freePort()}/none`, connectionTimeoutMillis: 300 });
    dead.on("error", () => undefined);
    const gateway = createGateway({
      ...backends.gatewayOptions({ healthTimeoutMs: 1_000 }),
      records: { pool: dead },
      logger: pino({ level: "silent" }),
    });
    const serving = await serve(gateway.app);
    const client = httpClient(serving.port);
    try {
      const res = await client.send({ method: "GET", path: "/healthz" });
      expect(res.status).toBe(200);
      const report = res.json<Report>();
      expect(report.status).toBe("degraded");
      expect(report.checks.postgres?.ok).toBe(false);
      expect(report.checks.postgres?.error).toMatch(/refused the connection \(ECONNREFUSED\)/);
      expect(report.checks.s3?.ok).toBe(true);
      const write = await client.send({
        method: "PUT",
        path: "/v1/records/x",
        headers: { ...writeHeaders(KEYS.admin, 1n), ...json },
        body: "1",
      });
      expect(write.status).toBe(503);
      expect(write.headers["retry-after"]).toBe("1");
    } finally {
      client.close();
      await serving.drain(1_000);
      await dead.end();
    }
  });

  it("503 naming S3 when the bucket is not there", async () => {
    const options = backends.gatewayOptions({ healthTimeoutMs: 1_000 });
    const gateway = createGateway({
      ...options,
      objects: { client: backends.s3Client as NonNullable<Backends["s3Client"]>, bucket: "no-such-bucket-here" },
    });
    // Its PostgreSQL schema is new: migrated, so that S3 alone is not set up.
    await gateway.prepare({ verify: false });
    const serving = await serve(gateway.app);
    const client = httpClient(serving.port);
    try {
      const res = await client.send({ method: "GET", path: "/healthz" });
      expect(res.status).toBe(503);
      expect(res.json<Report>().checks).toMatchObject({ s3: { ok: false, problem: "no-such-bucket" }, postgres: { ok: true } });
    } finally {
      client.close();
      await serving.drain(1_000);
    }
  });

  it("Redis: healthy while a quorum of lock nodes answers, degraded (and leases 503) once it does not", async () => {
    const nodes = backends.redis?.nodes ?? [];
    await nodes[0]?.kill();
    const one = await gw.client.send({ method: "GET", path: "/healthz" });
    expect(one.status).toBe(200);
    expect(one.json<Report>().checks.redis).toMatchObject({ ok: true, nodes: [{ ok: false }, { ok: true }, { ok: true }] });
    expect((await gw.client.json("POST", "/v1/leases", { resource: "h/1", ttlMs: 1_000 }, bearer(KEYS.admin))).status).toBe(201);

    await nodes[1]?.kill();
    const two = await gw.client.send({ method: "GET", path: "/healthz" });
    // The stores still serve: the instance stays in the load balancer, its lease routes answer 503.
    expect(two.status).toBe(200);
    expect(two.json<Report>()).toMatchObject({
      status: "degraded",
      checks: { redis: { ok: false, nodes: [{ ok: false }, { ok: false }, { ok: true }] } },
    });
    const lease = await gw.client.json("POST", "/v1/leases", { resource: "h/2", ttlMs: 1_000 }, bearer(KEYS.admin));
    expect(lease.status).toBe(503);
    expect(lease.json()).toMatchObject({ type: "/problems/unavailable" });
  });
});
