import { Agent, request, type IncomingMessage } from "node:http";
import { connect } from "node:net";
import { once } from "node:events";
import { Readable, Writable } from "node:stream";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KEYS, bearer, runGateway, startBackends, writeHeaders, type Backends, type RunningGateway } from "./test-support.js";

/**
 * JSON bodies: every body here is sent both ways — with Content-Length, and chunked — and must get
 * the same answer and store the same value; only UTF-8 is JSON, and a body that holds no value is 400.
 */
const LIMIT = 4096;
let backends: Backends;
let gw: RunningGateway;
let token = 0n;
/** The gateway's log lines, parsed. */
const logged: Record<string, unknown>[] = [];
const sink = new Writable({
  write(chunk: Buffer, _encoding, done) {
    for (const line of chunk.toString().split("\n")) if (line !== "") logged.push(JSON.parse(line) as Record<string, unknown>);
    done();
  },
});

beforeAll(async () => {
  backends = await startBackends({ postgres: true });
  gw = await runGateway(backends.gatewayOptions({ limits: { recordBytes: LIMIT }, logger: pino({ level: "info" }, sink) }));
});
afterAll(async () => {
  await gw?.close();
  await backends?.stop();
});

interface Outcome {
  readonly status: number;
  readonly problem?: unknown;
  readonly stored?: unknown;
}

async function write(key: string, body: Buffer, contentType: string, chunked: boolean): Promise<Outcome> {
  const answer = await gw.client.send({
    method: "PUT",
    path: `/v1/records/${key}`,
    headers: {
      ...writeHeaders(KEYS.admin, ++token),
      "content-type": contentType,
      ...(chunked ? { "transfer-encoding": "chunked" } : { "content-length": String(body.length) }),
    },
    // Two chunks, split inside the body, so that the chunked reader joins pieces too.
    body: chunked ? Readable.from([body.subarray(0, 3), body.subarray(3)]) : body,
  });
  const read = await gw.client.send({ method: "GET", path: `/v1/records/${key}`, headers: bearer(KEYS.admin) });
  return {
    status: answer.status,
    ...(answer.status >= 400 ? { problem: answer.json().type } : {}),
    ...(read.status === 200 ? { stored: read.json() } : {}),
  };
}

const JSON_TYPE = "application/json";
const bytes = (text: string): Buffer => Buffer.from(text, "utf8");
/** The store's InvalidArgumentError, as the gateway answers it. */
const INVALID = "/problems/invalid-request";
const cases: ReadonlyArray<{ name: string; body: Buffer; type?: string; status: number; stored?: unknown; problem?: string }> = [
  { name: "an object", body: bytes('{"n":1,"s":"é😀"}'), status: 200, stored: { n: 1, s: "é😀" } },
  { name: "charset=utf-8", body: bytes('{"n":2}'), type: "application/json; charset=utf-8", status: 200, stored: { n: 2 } },
  { name: 'charset="UTF-8", odd spacing', body: bytes("[1]"), type: 'Application/JSON ;charset="UTF-8"', status: 200, stored: [1] },
  { name: "a byte order mark", body: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), bytes('{"n":3}')]), status: 200, stored: { n: 3 } },
  { name: "a scalar", body: bytes("  7 "), status: 200, stored: 7 },
  // Not UTF-8, so not JSON: decoding would store U+FFFD in its place, a value the client never sent.
  { name: "malformed UTF-8 in a string", body: Buffer.from([0x22, 0x61, 0xff, 0x62, 0x22]), status: 400 },
  { name: "a lone surrogate encoded in UTF-8", body: Buffer.from([0x22, 0xed, 0xa0, 0x80, 0x22]), status: 400 },
  { name: "a sequence cut short", body: Buffer.from([0x22, 0x61, 0xe2, 0x82, 0x22]), status: 400 },
  // JSON that parses, and that jsonb refuses: the store's own check answers 400 before any I/O (the
  // gateway has no copy of it), and nothing is stored.
  { name: "an escaped U+0000", body: bytes('{"s":"nul \\u0000"}'), status: 400, problem: INVALID },
  { name: "an escaped lone surrogate", body: bytes('["\\ud800"]'), status: 400, problem: INVALID },
  { name: "nested 300 deep", body: bytes(`${"[".repeat(300)}${"]".repeat(300)}`), status: 400, problem: INVALID },
  { name: "a __proto__ key", body: bytes('{"__proto__":{"x":1}}'), status: 200, stored: { ["__proto__"]: { x: 1 } } },
  // Numbers are doubles once parsed: one whose double is another value would be stored as a number the
  // client never sent, so it is refused; one a double holds exactly is stored, however it was written.
  { name: "an integer past 2^53", body: bytes('{"id":9007199254740993}'), status: 400, problem: INVALID },
  { name: "a negative integer past 2^53", body: bytes("[-9007199254740993]"), status: 400, problem: INVALID },
  // 2^60 is a double, but JSON.stringify writes it (and jsonb keeps) 1152921504606847000: an int64 reader gets another number.
  { name: "2^60, written back as 1152921504606847000", body: bytes("[1152921504606846976]"), status: 400, problem: INVALID },
  { name: "more digits than a double holds", body: bytes('{"x":0.1234567890123456789}'), status: 400, problem: INVALID },
  { name: "the same, a dot among the digits", body: bytes('{"x":12345678.12345678912}'), status: 400, problem: INVALID },
  { name: "a number that underflows to 0", body: bytes('{"x":1e-400}'), status: 400, problem: INVALID },
  { name: "a number past a double's range", body: bytes('{"x":1e400}'), status: 400, problem: INVALID },
  {
    name: "numbers a double holds exactly, spelt any way",
    body: bytes("[9007199254740992, 1.5e3, 1.10, 0.1, 1E-7, 12345678901234.50, 2.5E+20]"),
    status: 200,
    stored: [9007199254740992, 1500, 1.1, 0.1, 1e-7, 12345678901234.5, 2.5e20],
  },
  {
    name: "long digits in a string only",
    body: bytes('{"card":"4111111111111111111e5","n":1}'),
    status: 200,
    stored: { card: "4111111111111111111e5", n: 1 },
  },
  { name: "not JSON", body: bytes('{"n":'), status: 400 },
  { name: "only a byte order mark", body: Buffer.from([0xef, 0xbb, 0xbf]), status: 400 },
  { name: "only spaces", body: bytes("   "), status: 400 },
  { name: "over the limit", body: bytes(JSON.stringify({ s: "x".repeat(LIMIT) })), status: 413 },
  {
    name: "exactly at the limit",
    body: bytes(JSON.stringify({ s: "x".repeat(LIMIT - 8) })),
    status: 200,
    stored: { s: "x".repeat(LIMIT - 8) },
  },
  { name: "latin1", body: bytes('{"n":4}'), type: "application/json; charset=latin1", status: 415 },
  { name: "UTF-16", body: Buffer.from('{"n":4}', "utf16le"), type: "application/json; charset=utf-16le", status: 415 },
  { name: "another media type", body: bytes('{"n":5}'), type: "text/plain", status: 415 },
];

describe("JSON bodies, read with Content-Length and chunked", () => {
  it.each(cases)("$name: $status both ways, the same value stored", async ({ name, body, type, status, stored, problem }) => {
    const key = `bodies/${name.replace(/[^a-z0-9]+/gi, "-")}`;
    const known = await write(`${key}/known`, body, type ?? JSON_TYPE, false);
    const chunked = await write(`${key}/chunked`, body, type ?? JSON_TYPE, true);
    expect(known.status, JSON.stringify(known)).toBe(status);
    expect(chunked).toEqual(known);
    if (problem !== undefined) expect(known.problem).toBe(problem);
    if (status === 200) expect(known.stored).toEqual(stored);
    else expect(known.stored).toBeUndefined();
  });

  it("a body over the limit: 413 whose detail names the limit", async () => {
    const answer = await gw.client.send({
      method: "PUT",
      path: "/v1/records/bodies/over",
      headers: { ...writeHeaders(KEYS.admin, ++token), "content-type": "application/json" },
      body: JSON.stringify({ s: "x".repeat(LIMIT) }),
    });
    expect(answer.status).toBe(413);
    expect(answer.json()).toMatchObject({ type: "/problems/too-large", detail: `body: more than ${LIMIT} bytes` });
  });

  it("an empty body is 400 both ways, and nothing is stored", async () => {
    const known = await write("bodies/empty/known", Buffer.alloc(0), JSON_TYPE, false);
    const chunked = await write("bodies/empty/chunked", Buffer.alloc(0), JSON_TYPE, true);
    expect(known).toMatchObject({ status: 400 });
    expect(known.stored).toBeUndefined();
    expect(chunked).toEqual(known);
  });

  it("a client that leaves before its announced body is complete writes nothing, and the gateway serves the next", async () => {
    const socket = connect(gw.serving.port, "127.0.0.1");
    await once(socket, "connect");
    const head = [
      "PUT /v1/records/bodies/left HTTP/1.1",
      "Host: localhost",
      `Authorization: Bearer ${KEYS.admin}`,
      `Fencing-Token: ${++token}`,
      "Content-Type: application/json",
      "Content-Length: 100",
      "",
      '{"n":',
    ].join("\r\n");
    socket.write(head);
    await new Promise((resolve) => setTimeout(resolve, 100));
    socket.destroy();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const read = await gw.client.send({ method: "GET", path: "/v1/records/bodies/left", headers: bearer(KEYS.admin) });
    expect(read.status).toBe(404);
    // Its request's line: cut by the client (499), not a failure of the gateway's logged with a stack.
    await expect.poll(() => logged.some((l) => l.status === 499 && l.route === "records"), { timeout: 5_000 }).toBe(true);
    expect(logged.filter((l) => l.msg === "request failed")).toEqual([]);
    expect((await write("bodies/after-left", bytes('{"n":6}'), JSON_TYPE, false)).stored).toEqual({ n: 6 });
  });

  it("a compressed body is 415, never inflated, and nothing is stored", async () => {
    const coded = (key: string, coding: string) =>
      gw.client.send({
        method: "PUT",
        path: `/v1/records/${key}`,
        headers: { ...writeHeaders(KEYS.admin, ++token), "content-type": JSON_TYPE, "content-encoding": coding },
        body: '{"n":7}',
      });
    expect((await coded("bodies/gzip", "gzip")).status).toBe(415);
    const read = await gw.client.send({ method: "GET", path: "/v1/records/bodies/gzip", headers: bearer(KEYS.admin) });
    expect(read.status).toBe(404);
    // identity is no coding at all.
    expect((await coded("bodies/identity", "Identity")).status).toBe(200);
  });
});

describe("a body over the limit, on a kept-alive connection", () => {
  /** One request on `agent`: its status, whether it went on a connection used before, and whether "100 Continue" came. */
  const put = (agent: Agent, key: string, body: string, headers: Record<string, string> = {}) =>
    new Promise<{ status: number; reused: boolean; continued: boolean }>((resolve, reject) => {
      const req = request({
        agent,
        port: gw.serving.port,
        host: "127.0.0.1",
        method: "PUT",
        path: `/v1/records/${key}`,
        headers: {
          ...writeHeaders(KEYS.admin, ++token),
          "content-type": JSON_TYPE,
          ...(headers["transfer-encoding"] === undefined ? { "content-length": String(body.length) } : {}),
          ...headers,
        },
      });
      let continued = false;
      req.on("continue", () => {
        continued = true;
        req.end(body);
      });
      req.on("response", (res: IncomingMessage) => {
        res.resume();
        res.on("end", () => resolve({ status: res.statusCode ?? 0, reused: req.reusedSocket, continued }));
      });
      req.on("error", reject);
      if (headers.expect === undefined) {
        // Chunked: in two writes, so that the limit is passed in the second.
        req.write(body.slice(0, 10));
        req.end(body.slice(10));
      }
    });

  it("is 413, and the connection serves the next request once the rest is discarded", async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      expect(await put(agent, "bodies/kept/first", '{"n":1}')).toMatchObject({ status: 200, reused: false });
      expect(await put(agent, "bodies/kept/over", JSON.stringify({ s: "x".repeat(LIMIT) }))).toMatchObject({ status: 413, reused: true });
      expect(await put(agent, "bodies/kept/after", '{"n":2}')).toMatchObject({ status: 200, reused: true });
    } finally {
      agent.destroy();
    }
  });

  it("chunked, a little over the limit: 413, and the rest is read and discarded on a connection kept alive", async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const chunked = { "transfer-encoding": "chunked" };
    try {
      expect(await put(agent, "bodies/chunked/first", '{"n":1}', chunked)).toMatchObject({ status: 200, reused: false });
      expect(await put(agent, "bodies/chunked/over", JSON.stringify({ s: "x".repeat(LIMIT) }), chunked)).toMatchObject({
        status: 413,
        reused: true,
      });
      expect(await put(agent, "bodies/chunked/after", '{"n":2}', chunked)).toMatchObject({ status: 200, reused: true });
    } finally {
      agent.destroy();
    }
  });

  it("announced with Expect: 100-continue, is 413 before the client sends a byte of it", async () => {
    const agent = new Agent({ keepAlive: false });
    try {
      const over = await put(agent, "bodies/continue/over", JSON.stringify({ s: "x".repeat(LIMIT) }), { expect: "100-continue" });
      expect(over).toMatchObject({ status: 413, continued: false });
      const within = await put(agent, "bodies/continue/within", '{"n":3}', { expect: "100-continue" });
      expect(within).toMatchObject({ status: 200, continued: true });
    } finally {
      agent.destroy();
    }
  });

  it("announced far over the limit, is 413 at once, and the connection closes rather than read it all", async () => {
    const socket = connect(gw.serving.port, "127.0.0.1");
    await once(socket, "connect");
    let answer = "";
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => (answer += chunk));
    const closed = once(socket, "close");
    socket.write(
      [
        "PUT /v1/records/bodies/huge HTTP/1.1",
        "Host: localhost",
        `Authorization: Bearer ${KEYS.admin}`,
        `Fencing-Token: ${++token}`,
        "Content-Type: application/json",
        // More than the limit, and more than the gateway reads to discard a refused body (1 MiB).
        `Content-Length: ${2 * 1024 * 1024}`,
        "",
        '{"s":"',
      ].join("\r\n"),
    );
    // Without its Connection: close, the gateway would wait for the rest of the 2 MiB, and the connection would stay open.
    await closed;
    expect(answer).toMatch(/^HTTP\/1\.1 413 /);
    expect(answer).toMatch(/\r\nconnection: close\r\n/i);
  });
});
