import { request } from "node:http";
import { createServer, type AddressInfo, type Socket } from "node:net";
import { Writable } from "node:stream";
import pg from "pg";
import { pino } from "pino";
import { freePort } from "@fenced/servers";
import { describe, expect, it } from "vitest";
import { createGateway } from "./index.js";
import { serve } from "./http/server.js";
import { problemName } from "./openapi/components.js";
import { openApiDocument } from "./openapi/document.js";
import { bearer, httpClient, KEYS, runGateway, useGateway } from "./test-support.js";

/**
 * GET /v1/fences/{resource} over HTTP, against real PostgreSQL, S3 and lock nodes: each configured
 * store's fence, as its ratchet holds it, scoped by the API key's resources like every route.
 */
const fixture = useGateway({ postgres: true, s3: true, redis: 3 });

interface Fences {
  readonly resource: string;
  readonly stores: { postgres?: { token: string; holder: string | null } | null; s3?: { token: string; holder: string | null } | null };
}

const fences = (resource: string, key: string = KEYS.service) =>
  fixture.gw.client.send({ method: "GET", path: `/v1/fences/${resource}`, headers: bearer(key) });

async function lease(resource: string): Promise<{ token: string; holder: string; fence: string }> {
  const res = await fixture.gw.client.json("POST", "/v1/leases", { resource, ttlMs: 10_000 }, bearer(KEYS.service));
  expect(res.status, res.text()).toBe(201);
  return res.json();
}

describe("GET /v1/fences/{resource}", () => {
  it("before anything was written under the resource: null in each store", async () => {
    const res = await fences("svc/untouched");
    expect(res.status, res.text()).toBe(200);
    expect(res.json<Fences>()).toEqual({ resource: "svc/untouched", stores: { postgres: null, s3: null } });
  });

  it("after a lease and a write: that store's fence is the lease's token and holder", async () => {
    const l = await lease("svc/orders/7");
    const write = (route: string, key: string) =>
      fixture.gw.client.send({
        method: "PUT",
        path: `/v1/${route}/${key}`,
        headers: { ...bearer(KEYS.service), "fencing-credential": l.fence, "content-type": "application/json" },
        body: '{"n":1}',
      });
    expect((await write("records", "svc/orders/7/total")).status).toBe(200);
    const fence = { token: l.token, holder: l.holder };
    expect((await fences("svc/orders/7")).json<Fences>()).toEqual({ resource: "svc/orders/7", stores: { postgres: fence, s3: null } });
    expect((await write("objects", "svc/orders/7/invoice")).status).toBe(200);
    // The resource, percent-encoded ('/' as %2F), names the same fences.
    expect((await fences("svc%2Forders%2F7")).json<Fences>()).toEqual({ resource: "svc/orders/7", stores: { postgres: fence, s3: fence } });
  });

  it("a fence raised by hand through the store library (2^62, no holder) is what the route answers", async () => {
    const { records, objects } = fixture.gw.gateway;
    const high = { resource: "svc/poisoned", token: 2n ** 62n };
    await records?.register(high);
    await objects?.register(high);
    const res = await fences("svc/poisoned");
    expect(res.json<Fences>().stores).toEqual({
      postgres: { token: "4611686018427387904", holder: null },
      s3: { token: "4611686018427387904", holder: null },
    });
    // A lease's token is now below it: the storage refuses the lease's writes, which the fences explain.
    const l = await lease("svc/poisoned");
    expect(BigInt(l.token)).toBeLessThan(2n ** 62n);
  });

  it("scoped by the API key's resources: outside them, the refusal every route gives; read-only keys may read", async () => {
    const outside = await fences("svc/orders/7", KEYS.teamA);
    expect(outside.status).toBe(403);
    const leaseOutside = await fixture.gw.client.json(
      "POST",
      "/v1/leases",
      { resource: "svc/orders/7", ttlMs: 10_000 },
      bearer(KEYS.teamA),
    );
    expect(leaseOutside.status).toBe(403);
    // Each answer has its own request id.
    const { detail: _detail, requestId: _id, ...refusal } = outside.json();
    const { detail: _leaseDetail, requestId: _leaseId, ...leaseRefusal } = leaseOutside.json();
    expect(refusal).toEqual(leaseRefusal);
    expect(refusal).toMatchObject({ type: "/problems/forbidden" });
    expect((await fences("svc/orders/7", KEYS.reader)).status).toBe(200);
    const anonymous = await fixture.gw.client.send({ method: "GET", path: "/v1/fences/svc/orders/7" });
    expect(anonymous.status).toBe(401);
  });

  it("a malformed resource is 400, another method 405", async () => {
    for (const path of ["/v1/fences/", "/v1/fences/%ZZ", "/v1/fences/svc%01x", "/v1/fences/%ED%A0%80"]) {
      const res = await fixture.gw.client.send({ method: "GET", path, headers: bearer(KEYS.admin) });
      expect(res.status, path).toBe(400);
      expect(res.json(), path).toMatchObject({ type: "/problems/invalid-request", errors: [{ path: "resource" }] });
    }
    const put = await fixture.gw.client.send({ method: "PUT", path: "/v1/fences/svc/x", headers: bearer(KEYS.service), body: "" });
    expect(put.status).toBe(405);
    expect(put.headers.allow).toBe("GET, HEAD");
  });

  it("answers only the stores the gateway is configured with; a store that fails answers through the problem table", async () => {
    const { backends } = fixture;
    const { objects: _objects, leases: _leases, ...postgresOnly } = backends.gatewayOptions();
    const gw = await runGateway(postgresOnly);
    try {
      const only = await gw.client.send({ method: "GET", path: "/v1/fences/svc/x", headers: bearer(KEYS.service) });
      expect(only.json<Fences>()).toEqual({ resource: "svc/x", stores: { postgres: null } });
    } finally {
      await gw.close();
    }
    // PostgreSQL refuses the connection (nothing listens): 503 unavailable, Retry-After 1.
    const dead = new pg.Pool({ connectionString: `postgres://nobody@127.0.0.1:${await freePort()}/none` });
    dead.on("error", () => undefined);
    const unmigrated = backends.gatewayOptions();
    for (const [records, type] of [
      [{ pool: dead }, "/problems/unavailable"],
      [{ pool: backends.pool as pg.Pool, schema: "never_migrated" }, "/problems/backend-misconfigured"],
    ] as const) {
      const { objects: _o, leases: _l, ...options } = unmigrated;
      const serving = await serve(createGateway({ ...options, records }).app, { port: 0 });
      const client = httpClient(serving.port);
      try {
        const res = await client.send({ method: "GET", path: "/v1/fences/svc/x", headers: bearer(KEYS.service) });
        expect(res.json(), type).toMatchObject({ type });
        expect(res.status).toBe(503);
      } finally {
        client.close();
        await serving.drain(1_000);
      }
    }
    await dead.end();
  });
});

describe("the API document lists what GET /v1/fences/{resource} answers", () => {
  it("every problem kind the route can answer, and the answer's schema", () => {
    const op = openApiDocument().paths["/v1/fences/{resource}"]?.get;
    expect(op?.operationId).toBe("getFences");
    const documented = new Set<string>();
    JSON.stringify(op?.responses, (key, value: unknown) => {
      if (key === "$ref" && typeof value === "string") documented.add(value.replace("#/components/schemas/", ""));
      return value;
    });
    // Credentials, the resource, its scope; a store's typed failures and a backend's own errors (problems/problem.ts).
    const kinds = [
      "unauthorized",
      "invalid",
      "forbidden",
      "unavailable",
      "backendMisconfigured",
      "corruptState",
      "backendError",
      "internal",
    ] as const;
    expect(kinds.filter((k) => !documented.has(problemName(k)))).toEqual([]);
  });
});

describe("a client that leaves while its fence is read", () => {
  it("is not logged as a failure of the gateway: no error-level 'request failed'", async () => {
    const sockets: Socket[] = [];
    const hole = createServer((s) => void sockets.push(s)); // accepts, never answers: the read waits
    await new Promise<void>((resolve) => hole.listen(0, "127.0.0.1", resolve));
    const pool = new pg.Pool({ connectionString: `postgres://x@127.0.0.1:${(hole.address() as AddressInfo).port}/x` });
    pool.on("error", () => undefined);
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split("\n")) if (line !== "") lines.push(JSON.parse(line) as Record<string, unknown>);
        done();
      },
    });
    const { objects: _objects, leases: _leases, ...options } = fixture.backends.gatewayOptions();
    const gateway = createGateway({ ...options, records: { pool }, storeTimeoutMs: 2_000, logger: pino({ level: "info" }, sink) });
    const serving = await serve(gateway.app, { port: 0 });
    try {
      await new Promise<void>((resolve) => {
        const req = request({ host: "127.0.0.1", port: serving.port, path: "/v1/fences/svc/y", headers: bearer(KEYS.service) });
        req.on("error", () => resolve());
        req.end();
        setTimeout(() => {
          req.destroy();
          resolve();
        }, 200);
      });
      // The request's line, once the gateway has seen its client go: 499, and no failure logged with it.
      await expect.poll(() => lines.some((l) => l.status === 499), { timeout: 5_000 }).toBe(true);
      expect(lines.find((l) => l.msg === "request failed")).toBeUndefined();
    } finally {
      await serving.drain(500);
      for (const s of sockets) s.destroy();
      hole.close();
      await pool.end().catch(() => undefined);
    }
  });
});
