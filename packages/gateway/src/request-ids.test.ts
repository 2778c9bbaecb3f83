import { connect } from "node:net";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGateway, type Gateway } from "./index.js";
import { serve, type Serving } from "./http/server.js";
import { API_KEYS, bearer, httpClient, KEYS, type HttpClient } from "./test-support.js";

/**
 * Request ids: every answer carries X-Request-Id (the client's when sane, else a new one), every log
 * line of the request and its problem body carry the same; HTTP the server cannot parse is answered
 * as Node answers it, with an id, counted and logged. No backend is needed: a gateway without stores.
 */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

let gateway: Gateway;
let serving: Serving;
let client: HttpClient;
const lines: Record<string, unknown>[] = [];

beforeAll(async () => {
  const logger = pino({ level: "debug" }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
  gateway = createGateway({ apiKeys: API_KEYS, logger, defaultMetrics: false });
  serving = await serve(gateway.app, { port: 0 });
  client = httpClient(serving.port);
});
afterAll(async () => {
  client?.close();
  await serving?.drain(1_000);
});

/** What the server answers to raw bytes, read until it closes the connection. */
function raw(bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(serving.port, "127.0.0.1", () => socket.end(bytes));
    const chunks: Buffer[] = [];
    socket.on("data", (c: Buffer) => chunks.push(c));
    socket.on("error", reject);
    socket.on("close", () => resolve(Buffer.concat(chunks).toString("latin1")));
  });
}

/** Waits until `found` finds a log line (the request's line is written when its response is over). */
async function logged(found: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
  for (;;) {
    const line = lines.find(found);
    if (line !== undefined) return line;
    await new Promise((resolve) => setImmediate(resolve));
  }
}

describe("X-Request-Id", () => {
  it("a new id on every answer, success or problem, and the problem body and the request's log line carry it", async () => {
    const ok = await client.send({ method: "GET", path: "/openapi.json" });
    const missing = await client.send({ method: "GET", path: "/v1/records/a", headers: bearer(KEYS.admin) });
    const ids = [ok.headers["x-request-id"], missing.headers["x-request-id"]];
    for (const id of ids) expect(id).toMatch(UUID);
    expect(ids[0]).not.toBe(ids[1]);
    expect(missing.status).toBe(404);
    expect(missing.json()).toMatchObject({ type: "/problems/not-found", requestId: ids[1] });
    expect(await logged((l) => l.requestId === ids[1])).toMatchObject({ level: 30, msg: "request", status: 404, problem: "not-found" });
  });

  it("the client's own id when it is sane; a new one when it is too long, empty or outside the safe alphabet", async () => {
    const ask = (id: string) => client.send({ method: "GET", path: "/v1/nothing", headers: { "x-request-id": id } });
    for (const sane of [
      "4bf92f3577b34da6a3ce929d0e0e4736",
      "Root=1-5759e988-bd862e3fe1be46a994272793",
      "a".repeat(128),
      "req:42/b+c=@_.-",
    ]) {
      const answer = await ask(sane);
      expect(answer.headers["x-request-id"]).toBe(sane);
      expect(answer.json().requestId).toBe(sane);
    }
    for (const insane of ["a".repeat(129), "two words", "x\u00e9", "a;b", "<script>"]) {
      const answer = await ask(insane);
      expect(answer.headers["x-request-id"]).toMatch(UUID);
      expect(answer.json().requestId).toBe(answer.headers["x-request-id"]);
    }
  });
});

describe("malformed HTTP (the server's clientError)", () => {
  it("is answered as Node answers it, with a request id, counted by reason and logged with that id", async () => {
    const answer = await raw("GARBAGE\r\n\r\n");
    expect(answer).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(answer).toMatch(/\r\nConnection: close\r\n/);
    const id = /\r\nX-Request-Id: ([^\r]+)\r\n/.exec(answer)?.[1];
    expect(id).toMatch(UUID);
    expect(await logged((l) => l.requestId === id)).toMatchObject({ level: 30, msg: "malformed request", reason: "bad_request" });

    const tooLarge = await raw(`GET / HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`);
    expect(tooLarge).toMatch(/^HTTP\/1\.1 431 Request Header Fields Too Large\r\n/);

    const metrics = await gateway.metrics.registry.getSingleMetricAsString("fenced_gateway_malformed_requests_total");
    expect(metrics).toContain('fenced_gateway_malformed_requests_total{reason="bad_request"} 1');
    expect(metrics).toContain('fenced_gateway_malformed_requests_total{reason="headers_too_large"} 1');
  });

  it("a client that resets its connection mid-request is not counted", async () => {
    const before = await gateway.metrics.registry.getSingleMetricAsString("fenced_gateway_malformed_requests_total");
    await new Promise<void>((resolve) => {
      const socket = connect(serving.port, "127.0.0.1", () => {
        socket.write("GET / HTTP/1.1\r\nHost: x\r\n");
        socket.resetAndDestroy();
      });
      socket.on("close", () => resolve());
    });
    // A request that follows is served: the reset's clientError, if any, has been handled by then.
    expect((await client.send({ method: "GET", path: "/openapi.json" })).status).toBe(200);
    expect(await gateway.metrics.registry.getSingleMetricAsString("fenced_gateway_malformed_requests_total")).toBe(before);
  });
});

describe("the request's logger", () => {
  it("is made only for a request that logs: a success at info makes none, a refusal one, whose line carries the id", async () => {
    const written: Record<string, unknown>[] = [];
    const logger = pino({ level: "info" }, { write: (line: string) => void written.push(JSON.parse(line) as Record<string, unknown>) });
    let made = 0;
    const child = logger.child.bind(logger);
    logger.child = ((...args: Parameters<typeof child>) => {
      made++;
      return child(...args);
    }) as typeof logger.child;
    const quiet = createGateway({ apiKeys: API_KEYS, logger, defaultMetrics: false });
    const at = await serve(quiet.app, { port: 0 });
    const to = httpClient(at.port);
    try {
      // A success is logged at debug: under an info logger its request writes no line and makes no logger.
      for (let i = 0; i < 3; i++) expect((await to.send({ method: "GET", path: "/openapi.json" })).status).toBe(200);
      expect(made).toBe(0);
      const missing = await to.send({ method: "GET", path: "/v1/records/a", headers: bearer(KEYS.admin) });
      expect(missing.status).toBe(404);
      const id = missing.headers["x-request-id"];
      for (;;) {
        if (written.some((l) => l.requestId === id)) break;
        await new Promise((resolve) => setImmediate(resolve));
      }
      expect(made).toBe(1);
    } finally {
      to.close();
      await at.drain(1_000);
    }
  });
});
