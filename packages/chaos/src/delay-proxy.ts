import { createServer, connect, type Server, type Socket } from "node:net";
import { performance } from "node:perf_hooks";

/** "up": client → server (requests); "down": server → client (replies). */
export type Direction = "up" | "down";
export type Directions = Direction | "both";

/**
 * One direction of one proxied connection. Chunks keep their order: each is released no earlier
 * than the one before it, so lowering the delay never lets a later packet overtake an earlier one
 * (TCP would not either), and a delay added mid-stream holds back everything behind it.
 */
class DelayedPipe {
  private readonly queue: { chunk: Buffer; due: number }[] = [];
  private lastDue = 0;
  private timer: NodeJS.Timeout | undefined;
  private endPending = false;

  constructor(
    private readonly to: Socket,
    private readonly delayMs: () => number,
  ) {}

  push(chunk: Buffer): void {
    if (this.to.destroyed) return;
    const now = performance.now();
    const due = Math.max(now + this.delayMs(), this.lastDue);
    this.lastDue = due;
    if (due <= now && this.queue.length === 0) {
      this.to.write(chunk);
      return;
    }
    this.queue.push({ chunk, due });
    this.arm();
  }

  /** The sender finished: forward the FIN after everything queued has gone out. */
  end(): void {
    this.endPending = true;
    if (this.queue.length === 0 && !this.to.destroyed) this.to.end();
  }

  clear(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.queue.length = 0;
  }

  private arm(): void {
    if (this.timer !== undefined) return;
    const head = this.queue[0];
    if (head === undefined) return;
    this.timer = setTimeout(() => this.flush(), Math.max(0, head.due - performance.now()));
  }

  private flush(): void {
    this.timer = undefined;
    const now = performance.now();
    while (this.queue.length > 0 && (this.queue[0]?.due ?? Infinity) <= now) {
      const item = this.queue.shift();
      if (item !== undefined && !this.to.destroyed) this.to.write(item.chunk);
    }
    if (this.queue.length > 0) this.arm();
    else if (this.endPending && !this.to.destroyed) this.to.end();
  }
}

/**
 * A TCP proxy on loopback in front of one server, for one client: the nemesis delays the packets of
 * one worker to one Redis node or to the store without touching anyone else's. Delays are added as
 * handles and the largest active one applies, so overlapping faults on the same link compose.
 */
export class DelayProxy {
  private readonly active: Record<Direction, Set<{ ms: number }>> = { up: new Set(), down: new Set() };
  private readonly sockets = new Set<Socket>();
  private readonly pipes = new Set<DelayedPipe>();
  /** Open client connections, each with its upstream leg and pipes: what resetConnections() cuts. */
  private readonly pairs = new Map<Socket, { upstream: Socket; up: DelayedPipe; down: DelayedPipe }>();

  private constructor(
    private readonly server: Server,
    readonly port: number,
    private target: { readonly host: string; readonly port: number },
  ) {}

  get targetHost(): string {
    return this.target.host;
  }

  get targetPort(): number {
    return this.target.port;
  }

  /**
   * Forwards the connections accepted from now on to host:port: a proxy can be started (and its port
   * handed out) before the server behind it listens.
   */
  forwardTo(host: string, port: number): void {
    this.target = { host, port };
  }

  /** Listens on 127.0.0.1, on a port the OS picks, and forwards every connection to host:port. */
  static async start(targetHost: string, targetPort: number): Promise<DelayProxy> {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    const address = server.address();
    if (address === null || typeof address === "string") throw new Error("delay proxy: could not read its own port");
    const proxy = new DelayProxy(server, address.port, { host: targetHost, port: targetPort });
    server.on("connection", (client) => proxy.accept(client));
    return proxy;
  }

  /** Current delay in ms for a direction (the largest active one). */
  delayMs(direction: Direction): number {
    let max = 0;
    for (const d of this.active[direction]) max = Math.max(max, d.ms);
    return max;
  }

  /** Adds a delay; the returned function removes exactly this one (idempotent). */
  addDelay(directions: Directions, ms: number): () => void {
    const removers = (directions === "both" ? (["up", "down"] as const) : [directions]).map((d) => {
      const handle = { ms };
      this.active[d].add(handle);
      return () => this.active[d].delete(handle);
    });
    return () => removers.forEach((remove) => remove());
  }

  clearDelays(): void {
    this.active.up.clear();
    this.active.down.clear();
  }

  /**
   * Resets every connection open through the proxy, both legs, with a TCP RST: the client sees
   * ECONNRESET in the middle of whatever it was doing (a request sent and not answered, a reply
   * half read), the server sees its peer vanish. Connections made afterwards are forwarded as usual.
   * Returns how many client connections were reset.
   */
  resetConnections(): number {
    let reset = 0;
    for (const [client, pair] of this.pairs) {
      this.pairs.delete(client);
      pair.up.clear();
      pair.down.clear();
      reset++;
      for (const socket of [client, pair.upstream]) if (!socket.destroyed) socket.resetAndDestroy();
    }
    return reset;
  }

  async close(): Promise<void> {
    for (const pipe of this.pipes) pipe.clear();
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    const upstream = connect(this.target.port, this.target.host);
    // Nagle on either leg would add its own latency to small requests and blur the injected one.
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    const up = new DelayedPipe(upstream, () => this.delayMs("up"));
    const down = new DelayedPipe(client, () => this.delayMs("down"));
    this.sockets.add(client).add(upstream);
    this.pipes.add(up).add(down);
    this.pairs.set(client, { upstream, up, down });
    client.on("data", (chunk: Buffer) => up.push(chunk));
    upstream.on("data", (chunk: Buffer) => down.push(chunk));
    client.on("end", () => up.end());
    upstream.on("end", () => down.end());

    // A reset (or a refused connection to a killed node) must reach the other side as a broken
    // connection at once, so that the client reconnects instead of waiting on a dead socket.
    const destroy = (): void => {
      up.clear();
      down.clear();
      client.destroy();
      upstream.destroy();
    };
    client.on("error", destroy);
    upstream.on("error", destroy);
    // A side that closes cleanly still gets what was already queued towards the other side
    // delivered, then the FIN: the close is itself a packet and is delayed like one.
    let closed = 0;
    const closedOne = (): void => {
      if (++closed < 2) return;
      this.sockets.delete(client);
      this.sockets.delete(upstream);
      this.pipes.delete(up);
      this.pipes.delete(down);
      this.pairs.delete(client);
    };
    client.on("close", () => {
      down.clear();
      up.end();
      closedOne();
    });
    upstream.on("close", () => {
      up.clear();
      down.end();
      closedOne();
    });
  }
}
