import { connect, createServer, type Server, type Socket } from "node:net";

/**
 * A TCP proxy in front of PostgreSQL for the tests: it forwards everything until the client sends a
 * message containing an armed pattern (e.g. the simple-query COMMIT), forwards that message to the
 * server, and when the server's answer to it arrives, drops the answer and cuts the client's
 * connection. The server has done the work; the client never hears of it: a lost answer, on demand.
 *
 * hold() and deliver(): a delay on the network, on demand. While held, what clients send is kept
 * back, and a client that closes its connection has that close kept back too; deliver() sends the
 * kept bytes on, in order, then the close (the server reads the bytes, then end of stream) — as
 * bytes still in flight when their sender gave up arrive.
 */
export class CutProxy {
  private armed: Buffer | undefined;
  private cutAfterRow = false;
  /** holdFrom()'s pattern: the client message containing it, and everything after, is held. */
  private holdPattern: Buffer | undefined;
  private readonly sockets = new Set<Socket>();
  /** While held: the kept-back sends of each connection, and whether its client has closed. */
  private held: Map<Socket, { chunks: Buffer[]; closed: boolean }> | undefined;
  private readonly upstreams = new Set<Socket>();
  /** How many answers were cut. */
  cuts = 0;

  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(target: { host: string; port: number }): Promise<CutProxy> {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    const address = server.address();
    if (address === null || typeof address === "string") throw new Error("the proxy has no TCP port");
    const proxy = new CutProxy(server, address.port);
    server.on("connection", (client: Socket) => proxy.pipe(client, target));
    return proxy;
  }

  /**
   * The next client message containing `pattern` has its answer lost (once). With `afterRow`, the
   * answer is passed on up to the end of its first DataRow, and the connection cut there: a row
   * arrived, its CommandComplete did not (the answer must start a chunk, as the answer to a
   * statement sent alone does).
   */
  arm(pattern: Buffer, options: { afterRow?: boolean } = {}): void {
    this.armed = pattern;
    this.cutAfterRow = options.afterRow === true;
  }

  /** Keeps back what every client sends from now on, until deliver(). */
  hold(): void {
    this.held = new Map();
  }

  /**
   * hold() from the first client chunk containing `pattern` on, that chunk included: a delay of one
   * statement (its name is in its Parse and Bind messages) and everything after it, while the
   * statements before it pass.
   */
  holdFrom(pattern: Buffer): void {
    this.holdPattern = pattern;
  }

  /** Sends on what was kept back, in order, then the closes of clients that closed meanwhile. */
  deliver(): void {
    const held = this.held ?? new Map<Socket, { chunks: Buffer[]; closed: boolean }>();
    this.held = undefined;
    for (const [upstream, { chunks, closed }] of held) {
      for (const chunk of chunks) upstream.write(chunk);
      if (closed) upstream.end();
    }
  }

  /** Whether what clients send is being kept back (hold(), or holdFrom() once its pattern was seen). */
  get holding(): boolean {
    return this.held !== undefined;
  }

  /** How many connections to the server are still open. */
  get connections(): number {
    return this.upstreams.size;
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private pipe(client: Socket, target: { host: string; port: number }): void {
    const upstream = connect(target.port, target.host);
    this.sockets.add(client).add(upstream);
    this.upstreams.add(upstream);
    upstream.on("close", () => this.upstreams.delete(upstream));
    let cutNextAnswer = false;
    let afterRow = false;
    // Client bytes seen lately, so that a pattern split across two chunks is still found.
    let recent = Buffer.alloc(0);
    client.on("data", (chunk: Buffer) => {
      const armed = this.armed;
      if (armed !== undefined) {
        recent = Buffer.concat([recent, chunk]).subarray(-(chunk.length + armed.length));
        if (recent.includes(armed)) {
          this.armed = undefined;
          cutNextAnswer = true;
          afterRow = this.cutAfterRow;
        }
      }
      if (this.holdPattern !== undefined && chunk.includes(this.holdPattern)) {
        this.holdPattern = undefined;
        this.hold();
      }
      const held = this.held;
      if (held !== undefined) {
        const kept = held.get(upstream) ?? { chunks: [], closed: false };
        held.set(upstream, kept);
        kept.chunks.push(chunk);
        return;
      }
      upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => {
      if (cutNextAnswer) {
        // The server answered: the work is done. The client never sees it (or only up to a row).
        this.cuts += 1;
        const rowEnd = afterRow ? endOfFirstDataRow(chunk) : undefined;
        if (rowEnd !== undefined) {
          client.end(chunk.subarray(0, rowEnd));
          upstream.destroy();
          return;
        }
        client.destroy();
        upstream.destroy();
        return;
      }
      client.write(chunk);
    });
    const close = (): void => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on("close", () => {
      const kept = this.held?.get(upstream);
      // Held: the close waits behind the kept bytes (deliver() ends the upstream); the answers have nowhere to go.
      if (kept !== undefined) {
        kept.closed = true;
        this.sockets.delete(client);
        upstream.removeAllListeners("data").on("data", () => undefined);
        return;
      }
      close();
    });
    client.on("error", () => undefined);
    upstream.on("close", close).on("error", close);
  }
}

/** Where the first DataRow ('D') of a chunk of server messages ends, the chunk starting at a message; undefined if it has none. */
function endOfFirstDataRow(chunk: Buffer): number | undefined {
  for (let at = 0; at + 5 <= chunk.length;) {
    const end = at + 1 + chunk.readUInt32BE(at + 1);
    if (chunk[at] === 0x44) return end <= chunk.length ? end : undefined;
    at = end;
  }
  return undefined;
}

/** The simple-query message of a COMMIT, as pg sends the store's COMMIT: 'Q', length 11, "COMMIT\0". */
export const COMMIT_MESSAGE = Buffer.from("Q\0\0\0\x0bCOMMIT\0", "latin1");

/**
 * The extended-query protocol's Sync: 'S', length 4. The commit of a single-statement write, which
 * the store sends alone, once the statement's answer has arrived.
 */
export const SYNC_MESSAGE = Buffer.from("S\0\0\0\x04", "latin1");

/**
 * A Flush, then a Sync: how pg sends the commit of a write sent with `rows` (Session.write,
 * `after-answer`) — the statement ends in a Flush, and its Sync follows alone once the answer is in.
 * Armed with it, the proxy loses the answer to that Sync only, never to a Sync sent with its
 * statement (P/B/D/E/S, no Flush).
 */
export const FLUSH_THEN_SYNC = Buffer.from("H\0\0\0\x04S\0\0\0\x04", "latin1");

/**
 * A pool whose connections go through a new CutProxy in front of the server at `serverUrl`, made by
 * `makePool` from the proxy's connection string; close() ends the pool, then the proxy.
 */
export async function poolThroughProxy<P extends { on(event: "error", listener: () => void): unknown; end(): Promise<void> }>(
  serverUrl: string,
  makePool: (connectionString: string) => P,
): Promise<{ proxy: CutProxy; pool: P; close: () => Promise<void> }> {
  const url = new URL(serverUrl);
  const proxy = await CutProxy.start({ host: url.hostname, port: Number(url.port) });
  url.host = `127.0.0.1:${proxy.port}`;
  const pool = makePool(url.toString());
  // A cut connection fails its idle client with an 'error': the pool must not take the process with it.
  pool.on("error", () => undefined);
  return {
    proxy,
    pool,
    close: async () => {
      await pool.end();
      await proxy.close();
    },
  };
}
