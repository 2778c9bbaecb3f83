import { createServer, connect, type Server, type Socket } from "node:net";
import { performance } from "node:perf_hooks";
import { afterEach, describe, expect, it } from "vitest";
import { DelayProxy } from "./delay-proxy.js";

/**
 * The delays the tests add each way: far above a round trip through the proxy on a busy machine (tens
 * of milliseconds there), so that a round trip without delay (under UP_MS) is told from one with either.
 */
const UP_MS = 400;
const DOWN_MS = 500;

/** An echo server: every byte comes back, so a round trip crosses the proxy once each way. */
async function echoServer(): Promise<{ server: Server; port: number }> {
  const server = createServer((s) => s.pipe(s));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  return { server, port: address.port };
}

function open(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => resolve(socket));
    socket.once("error", reject);
  });
}

/** Sends `text` and resolves with the ms until all of it came back. */
function roundTrip(socket: Socket, text: string): Promise<number> {
  const started = performance.now();
  return new Promise((resolve) => {
    let got = "";
    const onData = (chunk: Buffer): void => {
      got += chunk.toString();
      if (got.length >= text.length) {
        socket.off("data", onData);
        resolve(performance.now() - started);
      }
    };
    socket.on("data", onData);
    socket.write(text);
  });
}

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

describe("delay proxy", () => {
  it("started before its server listens, forwards to it once told where", async () => {
    const proxy = await DelayProxy.start("127.0.0.1", 0);
    cleanup.push(() => proxy.close());
    const { server, port } = await echoServer();
    cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
    proxy.forwardTo("127.0.0.1", port);
    expect(proxy.targetPort).toBe(port);
    const socket = await open(proxy.port);
    cleanup.push(() => void socket.destroy());
    expect(await roundTrip(socket, "hello")).toBeLessThan(UP_MS);
  });

  it("forwards without delay, then delays each direction by what was added, then not once removed", async () => {
    const { server, port } = await echoServer();
    cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
    const proxy = await DelayProxy.start("127.0.0.1", port);
    cleanup.push(() => proxy.close());
    const socket = await open(proxy.port);
    cleanup.push(() => void socket.destroy());

    expect(await roundTrip(socket, "a")).toBeLessThan(UP_MS);
    const removeUp = proxy.addDelay("up", UP_MS);
    expect(await roundTrip(socket, "b")).toBeGreaterThanOrEqual(UP_MS - 5);
    const removeDown = proxy.addDelay("down", DOWN_MS);
    expect(await roundTrip(socket, "c")).toBeGreaterThanOrEqual(UP_MS + DOWN_MS - 5);
    removeUp();
    removeDown();
    expect(await roundTrip(socket, "d")).toBeLessThan(UP_MS);
  });

  it("keeps the order of the bytes when the delay shrinks mid-stream, and overlapping delays use the largest", async () => {
    const { server, port } = await echoServer();
    cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
    const proxy = await DelayProxy.start("127.0.0.1", port);
    cleanup.push(() => proxy.close());
    const socket = await open(proxy.port);
    cleanup.push(() => void socket.destroy());

    const long = proxy.addDelay("both", 120);
    const short = proxy.addDelay("up", 30);
    expect(proxy.delayMs("up")).toBe(120);
    let received = "";
    socket.on("data", (c: Buffer) => (received += c.toString()));
    socket.write("first-");
    long();
    expect(proxy.delayMs("up")).toBe(30);
    short();
    socket.write("second");
    // Out of order, "second" would arrive first, and this would never hold.
    await expect.poll(() => received, { timeout: 5_000 }).toBe("first-second");
  });

  it("passes a server that dies, or is down, on to the client as a closed connection, so that it reconnects", async () => {
    // A server that drops every connection at its first byte, like a node killed mid-request.
    const server = createServer((s) => s.once("data", () => s.destroy()));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    if (address === null || typeof address === "string") throw new Error("no port");
    const proxy = await DelayProxy.start("127.0.0.1", address.port);
    cleanup.push(() => proxy.close());
    proxy.addDelay("both", 50);

    const first = await open(proxy.port);
    first.on("error", () => undefined);
    const firstClosed = new Promise<void>((resolve) => first.once("close", () => resolve()));
    first.write("x");
    await firstClosed;

    await new Promise<void>((resolve) => server.close(() => resolve()));
    const second = await open(proxy.port);
    second.on("error", () => undefined);
    await new Promise<void>((resolve) => second.once("close", () => resolve()));
  });

  it("resets every open connection mid-request: the client sees ECONNRESET, the server a reset, and new connections work", async () => {
    // A server that reads and never answers: a request in flight when the reset comes.
    const serverSide: Socket[] = [];
    const serverErrors: string[] = [];
    const server = createServer((s) => {
      serverSide.push(s);
      s.on("error", (err: NodeJS.ErrnoException) => serverErrors.push(err.code ?? err.message));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
    const address = server.address();
    if (address === null || typeof address === "string") throw new Error("no port");
    const proxy = await DelayProxy.start("127.0.0.1", address.port);
    cleanup.push(() => proxy.close());

    const sockets = [await open(proxy.port), await open(proxy.port)];
    const errors = sockets.map(
      (socket) => new Promise<string | undefined>((resolve) => socket.once("error", (err: NodeJS.ErrnoException) => resolve(err.code))),
    );
    for (const socket of sockets) socket.write("request");
    // Both connections forwarded: the server has its side of each.
    await expect.poll(() => serverSide.length, { timeout: 5_000 }).toBe(2);
    expect(proxy.resetConnections()).toBe(2);
    expect(await Promise.all(errors)).toEqual(["ECONNRESET", "ECONNRESET"]);
    await expect.poll(() => serverSide.every((s) => s.destroyed), { timeout: 5_000 }).toBe(true);
    await expect.poll(() => serverErrors, { timeout: 5_000 }).toContain("ECONNRESET");
    // Nothing left to reset; a new connection is forwarded as before.
    expect(proxy.resetConnections()).toBe(0);
    const { server: echo, port } = await echoServer();
    cleanup.push(() => new Promise<void>((r) => echo.close(() => r())));
    proxy.forwardTo("127.0.0.1", port);
    const again = await open(proxy.port);
    cleanup.push(() => void again.destroy());
    expect(await roundTrip(again, "after")).toBeLessThan(UP_MS);
  });
});
