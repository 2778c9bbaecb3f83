import { once } from "node:events";
import { connect, Server, type Socket } from "node:net";
import { tcpSockets } from "@fenced/servers/sockets";
import express from "express";
import { describe, expect, it, vi } from "vitest";
import { serve } from "./server.js";

/**
 * serve()'s listening sockets (listeners.ts): a burst of connections is accepted several to a turn of
 * the event loop, and with several sockets on the port it still has one maxConnections, refuses a port
 * something listens on, and drains every connection whichever socket accepted it.
 */

const BURST = 64;
const realSetInterval = globalThis.setInterval;

/** Opens `n` connections at once: each connect() is made before the event loop turns, so all wait in the accept queues together. */
function burst(port: number, n: number): Socket[] {
  return Array.from({ length: n }, () => connect(port, "127.0.0.1").on("error", () => undefined));
}

/** The local address (hex, as the kernel lists it) of each socket listening on `port`, IPv4 and IPv6. */
function listeningAddresses(port: number): string[] {
  // State 0A is LISTEN.
  return tcpSockets().flatMap((s) => (s.localPort === port && s.state === "0A" ? [s.localAddress] : []));
}

/** What a new connection to `port` meets: "accepted", or the error's code (ECONNREFUSED: nothing listens). */
const connectOutcome = (port: number): Promise<string> =>
  new Promise((resolve) =>
    connect(port, "127.0.0.1")
      .once("connect", function (this: Socket) {
        this.destroy();
        resolve("accepted");
      })
      .once("error", (err: NodeJS.ErrnoException) => resolve(err.code ?? "error")),
  );

/** Resolves when `socket` closes (not events.once: a cut reaches this side as a reset, an "error"). */
const closing = (socket: Socket): Promise<void> => new Promise((resolve) => socket.once("close", () => resolve()));

/** The turns of the event loop in which the server took the burst's connections: one count per turn that took any. */
async function acceptedPerTurn(acceptors: number): Promise<number[]> {
  const app = express().get("/", (_req, res) => void res.send("ok"));
  await using serving = await serve(app, { acceptors });
  let turn = 0;
  let turning = true;
  const next = (): void => {
    turn++;
    if (turning) setImmediate(next);
  };
  const byTurn = new Map<number, number>();
  serving.server.on("connection", () => byTurn.set(turn, (byTurn.get(turn) ?? 0) + 1));
  const sockets = burst(serving.port, BURST);
  setImmediate(next);
  await expect.poll(() => [...byTurn.values()].reduce((a, b) => a + b, 0)).toBe(BURST);
  turning = false;
  for (const s of sockets) s.destroy();
  return [...byTurn.values()];
}

describe("serve()'s listening sockets", () => {
  it("takes a burst of connections several to a turn of the event loop, where one socket takes one a turn", async () => {
    // libuv accepts one connection per listening socket each time the loop polls: one socket needs a turn for each.
    const one = await acceptedPerTurn(1);
    expect(Math.max(...one)).toBe(1);
    expect(one.length).toBe(BURST);
    // The kernel spreads the burst over 64 sockets, each taking one a turn.
    const many = await acceptedPerTurn(64);
    expect(many.length).toBeLessThan(BURST / 4);
  });

  it("holds one maxConnections over every socket, and serves those it keeps", async () => {
    const app = express().get("/", (_req, res) => void res.send("ok"));
    await using serving = await serve(app, { acceptors: 16, maxConnections: 8 });
    let dropped = 0;
    serving.server.on("drop", () => dropped++);
    const sockets = burst(serving.port, 40);
    const closed = sockets.map((s) => closing(s).then(() => true));
    const answered = sockets.map(
      (s) =>
        new Promise<boolean>((resolve) => {
          s.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
          s.once("data", (d: Buffer) => resolve(d.toString().startsWith("HTTP/1.1 200")));
          s.once("close", () => resolve(false));
        }),
    );
    // Those beyond the limit are closed as they arrive, whichever socket took them; the others are served.
    expect((await Promise.all(answered)).filter(Boolean).length).toBe(8);
    // Each is told as Node tells its own ("drop").
    expect(dropped).toBe(32);
    expect(serving.inFlight()).toBe(0);
    for (const s of sockets) s.destroy();
    expect(await Promise.all(closed)).toEqual(new Array<boolean>(40).fill(true));
  });

  it("listens on one address for a host name: every socket on the address the first resolved to", async () => {
    const app = express().get("/", (_req, res) => void res.send("ok"));
    await using serving = await serve(app, { host: "localhost", acceptors: 8 });
    const addresses = listeningAddresses(serving.port);
    expect(addresses).toHaveLength(8);
    expect(new Set(addresses).size).toBe(1);
    const answers = await Promise.all(
      Array.from({ length: 16 }, () => fetch(`http://${serving.host.includes(":") ? `[${serving.host}]` : serving.host}:${serving.port}/`)),
    );
    expect(answers.map((a) => a.status)).toEqual(new Array<number>(16).fill(200));
  });

  it("refuses a port something listens on (EADDRINUSE), as one socket would, though its own sockets share the port", async () => {
    const app = express();
    await using first = await serve(app, { acceptors: 16 });
    await expect(serve(app, { port: first.port, acceptors: 16 })).rejects.toMatchObject({ code: "EADDRINUSE" });
    await expect(serve(app, { port: first.port, acceptors: 1 })).rejects.toMatchObject({ code: "EADDRINUSE" });
  });

  it("a socket after the first that fails to listen fails the start: the process lives on, and the port is let go", async () => {
    // eslint-disable-next-line @typescript-eslint/unbound-method -- called below with its server as `this`
    const listen = Server.prototype.listen;
    let port: number | undefined;
    // The HTTP server's own socket listens; the next one fails as Node tells a failure to listen (EMFILE, …): an "error" on a later tick.
    const spy = vi.spyOn(Server.prototype, "listen").mockImplementation(function (this: Server, ...args: unknown[]) {
      if (port === undefined && (args[0] as { port?: number }).port === 0) return listen.apply(this, args as Parameters<typeof listen>);
      port = (args[0] as { port: number }).port;
      process.nextTick(() => this.emit("error", Object.assign(new Error("listen EMFILE"), { code: "EMFILE" })));
      return this;
    });
    try {
      await expect(serve(express(), { acceptors: 4 })).rejects.toMatchObject({ code: "EMFILE" });
    } finally {
      spy.mockRestore();
    }
    expect(port).toBeGreaterThan(0);
    expect(await connectOutcome(port as number)).toBe("ECONNREFUSED");
  });

  it("drains connections whichever socket took them: idle ones closed, one in flight answered, then done", async () => {
    let answer: () => void = () => undefined;
    const app = express()
      .get("/", (_req, res) => void res.send("ok"))
      .get("/slow", (_req, res) => void (answer = () => res.send("slow")));
    const serving = await serve(app, { acceptors: 16 });
    const sockets = burst(serving.port, 32);
    await Promise.all(
      sockets.map(async (s) => {
        s.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        await once(s, "data");
      }),
    );
    const slow = connect(serving.port, "127.0.0.1");
    slow.write("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    await expect.poll(() => serving.inFlight()).toBe(1);
    const closed = sockets.map(closing);
    const drained = serving.drain(10_000);
    await Promise.all(closed);
    // No socket takes new connections once the drain has begun.
    expect(await connectOutcome(serving.port)).toBe("ECONNREFUSED");
    answer();
    const [reply] = (await once(slow, "data")) as [Buffer];
    expect(reply.toString()).toMatch(/^HTTP\/1\.1 200[\s\S]*Connection: close[\s\S]*slow$/);
    expect(await drained).toBe(true);
  });

  it("leaves no timer behind when a drain ends before its first sweep of idle connections", async () => {
    // With nothing connected the drain ends within a turn of the loop, before the sweep it schedules
    // two check phases on: that sweep must not then start its 50 ms interval, which nothing would
    // clear and which would keep the process from exiting.
    const started: NodeJS.Timeout[] = [];
    const starts = vi.spyOn(globalThis, "setInterval").mockImplementation((...args: Parameters<typeof setInterval>) => {
      const timer = realSetInterval(...args);
      started.push(timer);
      return timer;
    });
    const clears = vi.spyOn(globalThis, "clearInterval");
    try {
      const serving = await serve(express(), { acceptors: 2 });
      expect(await serving.drain(10_000)).toBe(true);
      for (let turn = 0; turn < 3; turn++) await new Promise((resolve) => setImmediate(resolve));
      const cleared = new Set(clears.mock.calls.map(([timer]) => timer));
      expect(started.filter((timer) => !cleared.has(timer))).toEqual([]);
    } finally {
      starts.mockRestore();
      clears.mockRestore();
      for (const timer of started) clearInterval(timer);
    }
  });
});
