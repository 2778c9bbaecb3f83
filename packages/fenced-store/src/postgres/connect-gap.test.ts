import { connect, createServer, type Server, type Socket } from "node:net";
import pg from "pg";
import { startPostgres, type StartedPostgres } from "@fenced/servers";
import { afterAll, beforeAll, expect, it } from "vitest";
import { StoreUnavailableError } from "../errors.js";
import { FencedPostgres } from "./store.js";

// A new pool connection whose backend is terminated just after its start-up ended: the server's
// ReadyForQuery and its FATAL 57P01 reach the client in one read. pg parses both in one turn:
// ReadyForQuery completes the connect, pg-pool's _acquireClient removes its idle 'error' listener
// and resolves the promise of pool.connect() (a microtask, run only after the read); the FATAL, with
// no query active, is then emitted as the client's 'error' — before any Session listens to it.
// A kill of the server while a worker connects (its event loop a moment late) delivers the same.

/** Forwards everything, but holds the server's start-up answer until the server's next message (the FATAL), then sends both in one write. */
class HoldProxy {
  readonly backendPids: number[] = [];
  private readonly sockets = new Set<Socket>();
  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(target: { host: string; port: number }, onReady: (pid: number) => void): Promise<HoldProxy> {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    if (address === null || typeof address === "string") throw new Error("no port");
    const proxy = new HoldProxy(server, address.port);
    server.on("connection", (client: Socket) => {
      const upstream = connect(target.port, target.host);
      proxy.sockets.add(client).add(upstream);
      client.on("data", (c: Buffer) => upstream.write(c));
      let held: Buffer | undefined = Buffer.alloc(0);
      let pid = 0;
      upstream.on("data", (chunk: Buffer) => {
        if (held === undefined) return void client.write(chunk);
        held = Buffer.concat([held, chunk]);
        // Server messages: type byte, int32 length (including itself).
        let ready = false;
        for (let at = 0; at + 5 <= held.length;) {
          const type = String.fromCharCode(held[at] as number);
          const end = at + 1 + held.readInt32BE(at + 1);
          if (end > held.length) break;
          if (type === "K") pid = held.readInt32BE(at + 5);
          if (type === "Z") ready = true;
          if (type === "E" && ready) {
            // The FATAL after ReadyForQuery: everything in one write.
            client.write(held);
            held = undefined;
            return;
          }
          at = end;
        }
        if (ready && !proxy.backendPids.includes(pid)) {
          proxy.backendPids.push(pid);
          onReady(pid);
        }
      });
      const close = (): void => {
        if (held !== undefined && held.length > 0) client.write(held);
        held = undefined;
        client.end();
        upstream.destroy();
      };
      upstream.on("close", close).on("error", close);
      client.on("close", () => upstream.destroy()).on("error", () => upstream.destroy());
    });
    return proxy;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

let server: StartedPostgres;
let admin: pg.Client;
let proxy: HoldProxy;

beforeAll(async () => {
  server = await startPostgres();
  admin = new pg.Client({ connectionString: server.url });
  admin.on("error", () => undefined);
  await admin.connect();
  const target = new URL(server.url);
  proxy = await HoldProxy.start({ host: target.hostname, port: Number(target.port) }, (pid) => {
    void admin.query("SELECT pg_terminate_backend($1)", [pid]);
  });
});

afterAll(async () => {
  await proxy.close();
  await admin.end();
  await server.stop();
});

it("a connection terminated right after its start-up: a typed error, no unhandled 'error' event", async () => {
  const uncaught: unknown[] = [];
  const onUncaught = (err: unknown): void => void uncaught.push(err);
  process.prependListener("uncaughtException", onUncaught);
  const target = new URL(server.url);
  target.port = String(proxy.port);
  // The pool as an application builds it: pool.on("error") for its idle clients, as pg requires.
  const pool = new pg.Pool({ connectionString: target.toString(), max: 2 });
  pool.on("error", () => undefined);
  try {
    const store = new FencedPostgres(pool, { schema: "gap", timeoutMs: 2_000 });
    await expect(store.get("k")).rejects.toBeInstanceOf(StoreUnavailableError);
    await new Promise((r) => setTimeout(r, 100));
    expect(uncaught).toEqual([]);
  } finally {
    process.removeListener("uncaughtException", onUncaught);
    await pool.end().catch(() => undefined);
  }
});
