import { execFileSync } from "node:child_process";
import { once } from "node:events";
import { IncomingMessage, ServerResponse } from "node:http";
import { readFileSync } from "node:fs";
import { connect, createServer as createTcpServer, type AddressInfo, type Socket } from "node:net";
import { performance } from "node:perf_hooks";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import express from "express";
import pg from "pg";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { createGateway } from "./index.js";
import { serve, setEarlyHandler } from "./http/server.js";
import { API_KEYS, bearer, httpClient, KEYS } from "./test-support.js";

/**
 * The HTTP server's limits, against the real Node server: a client trickling its headers or its body
 * is cut at the deadline, connections beyond the cap are closed, the admin listener holds /metrics
 * and /healthz, and a request the drain cuts is logged as such.
 */

/** Sends `text` one byte per `everyMs` until the server closes the socket; resolves with what it answered and when. */
async function trickle(port: number, head: string, text: string, everyMs: number): Promise<{ answer: string; closedAfterMs: number }> {
  const socket = connect(port, "127.0.0.1");
  await once(socket, "connect");
  const started = performance.now();
  let answer = "";
  socket.on("data", (d: Buffer) => (answer += d.toString()));
  socket.on("error", () => undefined); // a write after the cut
  socket.write(head);
  let i = 0;
  const timer = setInterval(() => {
    if (i < text.length && !socket.destroyed) socket.write(text.charAt(i++));
  }, everyMs);
  // Not events.once: it rejects on 'error', and a cut may reach this side as a reset (ECONNRESET).
  await new Promise((resolve) => socket.once("close", resolve));
  clearInterval(timer);
  return { answer, closedAfterMs: performance.now() - started };
}

/** A server that accepts connections and never answers: a backend that is paused. */
/** Collects the names of the process warnings emitted from now until `end()`, which returns them. */
function processWarnings(): { end(): Promise<string[]> } {
  const names: string[] = [];
  const onWarning = (w: Error): void => void names.push(w.name);
  process.on("warning", onWarning);
  return {
    async end() {
      // Node emits process warnings on the next tick.
      await new Promise((r) => setImmediate(r));
      process.off("warning", onWarning);
      return names;
    },
  };
}

async function blackhole(): Promise<{ port: number; close(): void }> {
  const sockets: Socket[] = [];
  const server = createTcpServer((s) => sockets.push(s));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return {
    port: (server.address() as AddressInfo).port,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

describe("the HTTP server's limits", () => {
  it("cuts a client trickling its headers at 1 byte/s after the header deadline", async () => {
    const app = express().get("/", (_req, res) => res.send("ok"));
    await using serving = await serve(app, { headersTimeoutMs: 1_000, requestTimeoutMs: 30_000, checkIntervalMs: 100 });
    const { answer, closedAfterMs } = await trickle(serving.port, "GET / HTTP/1.1\r\n", "X-Slow: " + "a".repeat(60), 1_000);
    // Node answers 408 as it cuts the socket; the answer may lose the race with the cut (a reset, seen
    // on Node 24): what matters is the cut at the deadline, and that nothing but a 408 was answered.
    expect(answer === "" || /^HTTP\/1\.1 408/.test(answer), answer).toBe(true);
    expect(closedAfterMs).toBeGreaterThan(900);
    expect(closedAfterMs).toBeLessThan(2_500);
  });

  it("a keep-alive connection idle for longer than the header deadline still serves its next request", async () => {
    const app = express().get("/", (_req, res) => res.send("ok"));
    await using serving = await serve(app, { headersTimeoutMs: 500, keepAliveTimeoutMs: 5_000, checkIntervalMs: 100 });
    const socket = connect(serving.port, "127.0.0.1");
    await once(socket, "connect");
    let answer = "";
    socket.on("data", (d: Buffer) => (answer += d.toString()));
    socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    await new Promise((r) => setTimeout(r, 1_500));
    socket.write("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    await once(socket, "close");
    expect(answer.match(/HTTP\/1\.1 200/g)).toHaveLength(2);
  });

  it("cuts a body trickling at 1 byte/s after the request deadline, and a request in time is served", async () => {
    const app = express().put("/", (req, res) => {
      req.pipe(new Writable({ write: (_c, _e, done) => done() })).on("finish", () => res.send("stored"));
    });
    await using serving = await serve(app, { headersTimeoutMs: 500, requestTimeoutMs: 2_000, checkIntervalMs: 100 });
    const head = "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n";
    const { closedAfterMs } = await trickle(serving.port, head, "b".repeat(100), 1_000);
    expect(closedAfterMs).toBeGreaterThan(1_900);
    expect(closedAfterMs).toBeLessThan(3_500);
    const fast = await trickle(serving.port, "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\n", "abc", 10);
    expect(fast.answer).toMatch(/^HTTP\/1\.1 200[\s\S]*stored$/);
  });

  it("closes connections beyond maxConnections as they arrive", async () => {
    const app = express().get("/", (_req, res) => res.send("ok"));
    await using serving = await serve(app, { maxConnections: 2 });
    const open = await Promise.all(
      [0, 1].map(async () => {
        const s = connect(serving.port, "127.0.0.1");
        await once(s, "connect");
        return s;
      }),
    );
    await new Promise((r) => setTimeout(r, 100)); // the server has accepted both
    const third = await trickle(serving.port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "", 10);
    expect(third.answer).toBe("");
    open[0]?.destroy();
    await new Promise((r) => setTimeout(r, 100));
    const after = await trickle(serving.port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "", 10);
    expect(after.answer).toMatch(/^HTTP\/1\.1 200/);
    open[1]?.destroy();
  });

  it("listens with a backlog of listenBacklog (default 4,096, capped by net.core.somaxconn), not Node's 511", async () => {
    const app = express().get("/", (_req, res) => res.send("ok"));
    const somaxconn = Number(readFileSync("/proc/sys/net/core/somaxconn", "utf8"));
    await using given = await serve(app, { listenBacklog: 100 });
    await using byDefault = await serve(app);
    // The kernel's own view: `ss` shows a listening socket's backlog as its Send-Q.
    const backlogOf = (port: number): number =>
      Number(
        execFileSync("ss", ["-ltnH", `sport = :${port}`])
          .toString()
          .trim()
          .split(/\s+/)[2],
      );
    expect(backlogOf(given.port)).toBe(Math.min(100, somaxconn));
    expect(backlogOf(byDefault.port)).toBe(Math.min(4_096, somaxconn));
  });

  it("gives each request and response the app's own prototypes from birth, before express sees them", async () => {
    const seen: boolean[] = [];
    const app = express().get("/", (_req, res) => void res.send("ok"));
    setEarlyHandler(app, (req, res, next) => {
      // Before express: exactly the app's prototypes, so express's own switch on arrival (Object.setPrototypeOf) changes nothing.
      seen.push(Object.getPrototypeOf(req) === app.request && Object.getPrototypeOf(res) === app.response);
      seen.push(req instanceof IncomingMessage && res instanceof ServerResponse && typeof res.send === "function");
      next();
    });
    await using serving = await serve(app);
    const answer = await fetch(`http://127.0.0.1:${serving.port}/`);
    expect(await answer.text()).toBe("ok");
    expect(seen).toEqual([true, true]);
  });

  it("ends pipelined requests' responses whose connection closed before their turn (Node 22 never closes them), with no leak warning", async () => {
    const warnings = processWarnings();
    let answerFirst: () => void = () => undefined;
    const closed: boolean[] = [];
    const app = express()
      .get("/first", (_req, res) => void (answerFirst = () => res.send("one")))
      .get("/next", (_req, res) => {
        res.once("close", () => closed.push(res.closed));
        res.send("next");
      });
    await using serving = await serve(app);
    const socket = connect(serving.port, "127.0.0.1");
    socket.on("error", () => undefined);
    // More waiting on one connection than Node's 10 listeners before it warns of a leak.
    socket.write("GET /first HTTP/1.1\r\nHost: x\r\n\r\n" + "GET /next HTTP/1.1\r\nHost: x\r\n\r\n".repeat(12));
    // All are in: the others wait for the first's answer, which waits for the test.
    await expect.poll(() => serving.inFlight()).toBe(13);
    socket.destroy();
    // What waits for a response's "close" (admission control's slot, the accounting, the drain) is let go for each, and sees it closed.
    await expect.poll(() => serving.inFlight()).toBe(0);
    expect(closed).toEqual(new Array<boolean>(12).fill(true));
    answerFirst();
    expect(await warnings.end()).not.toContain("MaxListenersExceededWarning");
  });

  it("a response with many layers waiting for its end draws no leak warning (an object GET's pipeline has 11 close listeners)", async () => {
    const warnings = processWarnings();
    const app = express().get("/", async (_req, res) => {
      for (let i = 0; i < 12; i++) res.once("close", () => undefined);
      await pipeline(Readable.from(["streamed"]), res);
    });
    await using serving = await serve(app);
    const answer = await trickle(serving.port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "", 10);
    expect(answer.answer).toMatch(/^HTTP\/1\.1 200[\s\S]*streamed/);
    expect(await warnings.end()).not.toContain("MaxListenersExceededWarning");
  });

  it("serves /metrics and /healthz on the admin listener only, the API on the public one", async () => {
    const gateway = createGateway({ apiKeys: API_KEYS, separateAdmin: true, logger: pino({ level: "silent" }), defaultMetrics: false });
    await using publicPort = await serve(gateway.app);
    await using adminPort = await serve(gateway.admin);
    const pub = httpClient(publicPort.port);
    const adm = httpClient(adminPort.port);
    try {
      for (const path of ["/metrics", "/healthz"]) {
        expect((await pub.send({ method: "GET", path })).status, path).toBe(404);
        expect((await adm.send({ method: "GET", path })).status, path).toBe(200);
      }
      expect((await pub.send({ method: "GET", path: "/openapi.json" })).status).toBe(200);
      expect((await adm.send({ method: "GET", path: "/v1/records/x", headers: bearer(KEYS.admin) })).status).toBe(404);
      // The metrics count the public port's requests.
      const text = (await adm.send({ method: "GET", path: "/metrics" })).text();
      expect(text).toMatch(/fenced_gateway_request_duration_seconds_count\{route="openapi.json",method="GET",status="200"\} 1/);
    } finally {
      pub.close();
      adm.close();
    }
  });

  it("a connection that could not be accepted (ENFILE) is logged, and the gateway goes on serving", async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = pino(
      { level: "info" },
      new Writable({ write: (chunk: Buffer, _e, done) => (lines.push(JSON.parse(chunk.toString()) as never), done()) }),
    );
    const gateway = createGateway({ apiKeys: API_KEYS, logger, defaultMetrics: false });
    await using serving = await serve(gateway.app);
    // What node:net emits when accept() fails (its onconnection): with no listener, it would be thrown and end the process.
    const err = Object.assign(new Error("accept ENFILE"), { code: "ENFILE", errno: -23, syscall: "accept" });
    expect(serving.server.emit("error", err)).toBe(true);
    expect(lines.find((l) => l.level === 50)).toMatchObject({ err: { code: "ENFILE", syscall: "accept" } });
    const client = httpClient(serving.port);
    try {
      expect((await client.send({ method: "GET", path: "/livez" })).status).toBe(200);
    } finally {
      client.close();
    }
  });

  it("logs a request the drain cut as cut by the drain, not as a client that went away", async () => {
    const hole = await blackhole();
    const lines: Record<string, unknown>[] = [];
    const logger = pino(
      { level: "info" },
      new Writable({ write: (chunk: Buffer, _e, done) => (lines.push(JSON.parse(chunk.toString()) as never), done()) }),
    );
    const pool = new pg.Pool({ connectionString: `postgres://nobody@127.0.0.1:${hole.port}/none` });
    pool.on("error", () => undefined);
    const gateway = createGateway({ apiKeys: API_KEYS, records: { pool }, logger, defaultMetrics: false });
    const serving = await serve(gateway.app);
    const client = httpClient(serving.port);
    try {
      const answer = client.send({ method: "GET", path: "/v1/records/x", headers: bearer(KEYS.admin) }).catch((e: unknown) => e);
      // In flight once it reached the gateway (it then waits for the store that never answers).
      await expect.poll(() => serving.inFlight(), { timeout: 5_000 }).toBe(1);
      expect(await serving.drain(200)).toBe(false);
      await answer;
      await expect
        .poll(() => lines.find((l) => l.route === "records"), { timeout: 5_000 })
        .toMatchObject({ msg: "request cut by the drain", status: 503, cut: "drain" });
    } finally {
      client.close();
      hole.close();
      await pool.end().catch(() => undefined);
    }
  });
});
