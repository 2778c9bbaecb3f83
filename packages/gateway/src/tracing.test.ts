import { context, propagation, trace, SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace";
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { STORE_CHANNELS } from "@fenced/store";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerTracing } from "./ops/tracing.js";
import { bearer, KEYS, useGateway } from "./test-support.js";

/**
 * The spans of a traced write, as an application's SDK sees them (the SDK's in-memory exporter,
 * registered as the CLI registers it with --otlp: ops/tracing.ts): the gateway's request span, a
 * child of the client's W3C traceparent; under it the lock's acquire with one event per node, and
 * each store call with its SQL statements or S3 requests.
 */

const exporter = new InMemorySpanExporter();

beforeAll(async () => {
  await registerTracing([new SimpleSpanProcessor({ exporter })], {});
});
afterAll(() => {
  trace.disable();
  context.disable();
  propagation.disable();
});

const fixture = useGateway({ redis: 3, postgres: true, s3: true });

/** A client's trace: its traceparent header, and the ids the gateway's span must continue. */
function clientTrace(): { traceId: string; spanId: string; traceparent: string } {
  const hex = (n: number) => Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join("");
  const traceId = hex(32);
  const spanId = hex(16);
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}

/** The finished spans of one trace, and each span's children by name. */
function treeOf(traceId: string) {
  const spans = exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
  const children = (parent: ReadableSpan) => spans.filter((s) => s.parentSpanContext?.spanId === parent.spanContext().spanId);
  const only = (name: string, within: readonly ReadableSpan[] = spans): ReadableSpan => {
    const found = within.filter((s) => s.name === name);
    expect(
      found.map((s) => s.name),
      `one ${name} in ${spans.map((s) => s.name).join(", ")}`,
    ).toEqual([name]);
    return found[0] as ReadableSpan;
  };
  return { spans, children, only };
}

/** Waits until the request span of a trace has ended: the gateway ends it once the response is over. */
async function ended(traceId: string, name: string): Promise<void> {
  while (!exporter.getFinishedSpans().some((s) => s.spanContext().traceId === traceId && s.name === name))
    await new Promise((resolve) => setImmediate(resolve));
}

describe("OpenTelemetry spans of a traced write", () => {
  it("lease with fence-on-acquire, then a record and an object written: gateway → lock → PostgreSQL and → S3, one trace", async () => {
    const { client } = fixture.gw;
    const t = clientTrace();
    const headers = { ...bearer(KEYS.service), traceparent: t.traceparent };
    const lease = await client.json("POST", "/v1/leases", { resource: "svc/traced", ttlMs: 10_000, register: true }, headers);
    expect(lease.status, lease.text()).toBe(201);
    const { fence, token } = lease.json<{ fence: string; token: string }>();
    const write = (route: string, body: string) =>
      client.send({
        method: "PUT",
        path: `/v1/${route}/svc/traced/doc`,
        headers: { ...headers, "fencing-credential": fence, "content-type": "application/json" },
        body,
      });
    // What a subscriber to the stores' write channel runs in (a logger adding trace ids): the store call's span.
    const published: (string | undefined)[] = [];
    const listener = (): void => void published.push(trace.getActiveSpan()?.spanContext().spanId);
    subscribe(STORE_CHANNELS.write, listener);
    const record = await write("records", '{"n":1}');
    expect(record.status, record.text()).toBe(200);
    const object = await write("objects", '{"n":2}');
    expect(object.status, object.text()).toBe(200);
    unsubscribe(STORE_CHANNELS.write, listener);
    await ended(t.traceId, "PUT objects");

    const { spans, children, only } = treeOf(t.traceId);
    // Every request span continues the client's trace, as a child of the client's span.
    const requests = spans.filter((s) => s.attributes["http.request.method"] !== undefined);
    for (const s of requests) expect(s.kind).toBe(SpanKind.SERVER);
    expect(requests.map((s) => s.name).sort()).toEqual(["POST leases", "PUT objects", "PUT records"]);
    for (const s of requests) expect(s.parentSpanContext?.spanId).toBe(t.spanId);
    const post = only("POST leases");
    expect(post.attributes).toMatchObject({
      "http.request.method": "POST",
      "fenced.route": "leases",
      "http.response.status_code": 201,
      "fenced.outcome": "ok",
      "fenced.request_id": lease.headers["x-request-id"],
    });

    // The lease: the lock's acquire, one event per node, then a register with each store.
    const acquire = only("fenced.lock.acquire", children(post));
    expect(acquire.attributes).toMatchObject({ "fenced.resource": "svc/traced", "fenced.token": token, "fenced.outcome": "ok" });
    const nodes = acquire.events.filter((e) => e.name === "fenced.lock.node" && e.attributes?.["fenced.lock.phase"] === "acquire");
    expect(nodes.map((e) => e.attributes?.["fenced.lock.node"]).sort()).toEqual([0, 1, 2]);
    const registers = children(post).filter((s) => s.name === "fenced.store.register");
    expect(registers.map((s) => s.attributes["fenced.store"]).sort()).toEqual(["postgres", "s3"]);
    for (const r of registers)
      expect(r.attributes).toMatchObject({ "fenced.resource": "svc/traced", "fenced.token": token, "fenced.outcome": "ok" });
    const pgRegister = registers.find((s) => s.attributes["fenced.store"] === "postgres") as ReadableSpan;
    const statements = children(pgRegister);
    expect(statements.length).toBeGreaterThan(0);
    for (const s of statements) {
      expect(s.kind).toBe(SpanKind.CLIENT);
      expect(s.attributes["db.system.name"]).toBe("postgresql");
      expect(String(s.attributes["db.query.text"])).not.toBe("");
    }
    const s3Register = registers.find((s) => s.attributes["fenced.store"] === "s3") as ReadableSpan;
    expect(children(s3Register).map((s) => s.name)).toContain("S3.PutObject");

    // The record: the store's put under the request, its SQL statements under the put.
    const putRecord = only("fenced.store.put", children(only("PUT records")));
    expect(putRecord.attributes).toMatchObject({
      "fenced.store": "postgres",
      "fenced.key": "svc/traced/doc",
      "fenced.resource": "svc/traced",
      "fenced.token": token,
      "fenced.outcome": "ok",
      "fenced.version": record.json<{ version: string }>().version,
    });
    expect(children(putRecord).every((s) => s.name.startsWith("postgresql "))).toBe(true);
    expect(children(putRecord).length).toBeGreaterThan(0);
    // Each statement's span is its own statement's: the put's writes the record, the register's do not.
    const writesRecord = (s: ReadableSpan): boolean => /INSERT INTO \S*records/.test(String(s.attributes["db.query.text"]));
    expect(children(putRecord).some(writesRecord)).toBe(true);
    expect(statements.some(writesRecord)).toBe(false);

    // The object: the store's put, each S3 request under it, the manifest's PUT among them.
    const putObject = only("fenced.store.put", children(only("PUT objects")));
    expect(putObject.attributes).toMatchObject({ "fenced.store": "s3", "fenced.key": "svc/traced/doc", "fenced.outcome": "ok" });
    const requestsToS3 = children(putObject);
    expect(requestsToS3.map((s) => s.name)).toContain("S3.PutObject");
    for (const s of requestsToS3) expect(s.attributes).toMatchObject({ "rpc.system": "aws-api", "rpc.service": "S3" });
    expect(requestsToS3.some((s) => String(s.attributes["aws.s3.key"]).includes("manifests/svc/traced/doc"))).toBe(true);

    expect(published).toEqual([putRecord.spanContext().spanId, putObject.spanContext().spanId]);
  });

  it("a refused write: the store's span has the error's code as outcome and status ERROR; the request's, the problem's slug", async () => {
    const { client } = fixture.gw;
    const t = clientTrace();
    const headers = { ...bearer(KEYS.service), traceparent: t.traceparent };
    const first = await client.json("POST", "/v1/leases", { resource: "svc/refused", ttlMs: 10_000 }, bearer(KEYS.service));
    const old = first.json<{ fence: string; leaseId: string }>();
    expect((await client.json("POST", "/v1/leases/release", { leaseId: old.leaseId }, bearer(KEYS.service))).status).toBe(204);
    const second = await client.json(
      "POST",
      "/v1/leases",
      { resource: "svc/refused", ttlMs: 10_000, register: true },
      bearer(KEYS.service),
    );
    expect(second.status, second.text()).toBe(201);
    const stale = await client.send({
      method: "PUT",
      path: "/v1/records/svc/refused/doc",
      headers: { ...headers, "fencing-credential": old.fence, "content-type": "application/json" },
      body: "1",
    });
    expect(stale.status, stale.text()).toBe(409);
    await ended(t.traceId, "PUT records");

    const { only, children } = treeOf(t.traceId);
    const request = only("PUT records");
    expect(request.attributes).toMatchObject({ "http.response.status_code": 409, "fenced.outcome": "stale-token" });
    const put = only("fenced.store.put", children(request));
    expect(put.attributes["fenced.outcome"]).toBe("STALE_TOKEN");
    expect(put.status.code).toBe(SpanStatusCode.ERROR);
  });

  it("a lease extended and released: the lock's extend and release spans, each node's answer an event", async () => {
    const { client } = fixture.gw;
    const t = clientTrace();
    const headers = { ...bearer(KEYS.service), traceparent: t.traceparent };
    const lease = await client.json("POST", "/v1/leases", { resource: "svc/extended", ttlMs: 10_000 }, headers);
    const { leaseId, token } = lease.json<{ leaseId: string; token: string }>();
    const extended = await client.json("POST", "/v1/leases/extend", { leaseId, ttlMs: 20_000 }, headers);
    expect(extended.status, extended.text()).toBe(200);
    const next = extended.json<{ leaseId: string }>().leaseId;
    expect((await client.json("POST", "/v1/leases/release", { leaseId: next }, headers)).status).toBe(204);
    await ended(t.traceId, "POST leases");
    while (treeOf(t.traceId).spans.filter((s) => s.name === "POST leases").length < 3) await new Promise((r) => setImmediate(r));

    const { spans } = treeOf(t.traceId);
    for (const [name, phase, ttl] of [
      ["fenced.lock.extend", "extend", 20_000],
      ["fenced.lock.release", "release", undefined],
    ] as const) {
      const span = spans.find((s) => s.name === name);
      expect(span?.attributes, name).toMatchObject({ "fenced.resource": "svc/extended", "fenced.token": token, "fenced.outcome": "ok" });
      expect(span?.attributes["fenced.ttl_ms"]).toBe(ttl);
      const nodes = (span?.events ?? [])
        .filter((e) => e.attributes?.["fenced.lock.phase"] === phase)
        .map((e) => e.attributes?.["fenced.lock.node"]);
      expect(nodes.length, name).toBeGreaterThanOrEqual(2);
      // A child of its request's span.
      expect(spans.find((s) => s.spanContext().spanId === span?.parentSpanContext?.spanId)?.name).toBe("POST leases");
    }
  });

  it("without a traceparent the request span starts a trace of its own", async () => {
    const before = new Set(exporter.getFinishedSpans().map((s) => s.spanContext().spanId));
    const answer = await fixture.gw.client.send({ method: "GET", path: "/v1/records/svc/none", headers: bearer(KEYS.service) });
    expect(answer.status).toBe(404);
    let request: ReadableSpan | undefined;
    while (request === undefined) {
      request = exporter.getFinishedSpans().find((s) => !before.has(s.spanContext().spanId) && s.name === "GET records");
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(request.parentSpanContext).toBeUndefined();
    expect(request.attributes["fenced.request_id"]).toBe(answer.headers["x-request-id"]);
  });
});
