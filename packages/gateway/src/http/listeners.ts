import type { Server } from "node:http";
import { createServer as createNetServer, Server as NetServer, type AddressInfo, type Socket } from "node:net";

/**
 * The listening sockets of serve(): the HTTP server's own, and with `acceptors` (Linux) more on the same port.
 *
 * Why more than one. libuv accepts one connection each time the event loop polls (since libuv 1.45,
 * "don't accept() connections in a loop"). A gateway busy with writes polls every 10–30 ms, so it
 * accepts 30–100 connections a second: a burst of new ones — clients opening more connections as
 * answers slow, a load balancer's pool after a restart — waits in the kernel's accept queue for
 * seconds, each with its first request already sent. Nothing in the process sees those requests, so
 * admission control can neither refuse them nor count their wait (measured: docs/benchmarks.md,
 * Overload). Each further listening socket on the port (SO_REUSEPORT: the kernel spreads new
 * connections across them) adds one accept to every turn of the loop.
 *
 * What must not change with them:
 * - a port another process listens on is still refused (EADDRINUSE): SO_REUSEPORT would let a second
 *   gateway of the same user share the port and take half its connections, so a fixed port is first
 *   bound once without it;
 * - every connection is the HTTP server's own: the others' are handed to it ("connection"), which
 *   serves them, times them out and closes them as those it accepted;
 * - maxConnections bounds them all together, whichever socket accepted them;
 * - close() resolves once no socket accepts and every connection has ended (the HTTP server's own
 *   close() stops only its own socket: serve()'s drain closes them all).
 *
 * What does change: a program of the same user started later with SO_REUSEPORT of its own may bind
 * the port too and take a share of its connections (a gateway started later is refused, by the
 * probe — one started in the same instant may pass it too: the probe is closed before the sockets
 * bind, since every socket sharing a port must ask to share it); a connection made in the instant
 * the probe listens is reset; each socket has a backlog of its own.
 */
export interface ListenOptions {
  readonly host: string;
  readonly port: number;
  readonly backlog: number;
  /** Listening sockets on the port; more than 1 only where the platform spreads connections across them. */
  readonly acceptors: number;
  readonly maxConnections: number;
}

export interface Listening {
  /** Stops every socket accepting; resolves once every connection they accepted has ended. */
  close(): Promise<void>;
}

/** Where SO_REUSEPORT spreads new connections across the sockets that share a port (Node's `reusePort`). */
const SPREADS_CONNECTIONS = process.platform === "linux";

export async function listenOn(server: Server, options: ListenOptions): Promise<Listening> {
  const { host, backlog, acceptors } = options;
  if (acceptors <= 1 || !SPREADS_CONNECTIONS) {
    await listening(server, { host, port: options.port, backlog });
    return { close: () => closeAll(server, []) };
  }
  if (options.port !== 0) await refuseIfTaken(host, options.port);
  await listening(server, { host, port: options.port, backlog, reusePort: true });
  // The address the first resolved to: a host name is looked up once, not once per socket (each lookup
  // a turn of the loop in which the first already serves, and each free to answer another address).
  const bound = server.address() as AddressInfo;
  const address = { host: bound.address, port: bound.port, backlog };
  const limit = oneLimit(server, options.maxConnections);
  const others: NetServer[] = [];
  try {
    for (let i = 1; i < acceptors; i++) {
      // As node:http makes its own (allowHalfOpen, noDelay): a connection behaves the same whichever socket accepted it.
      const other = createNetServer({ allowHalfOpen: true, noDelay: true }, limit.hand);
      others.push(other);
      await listening(other, { ...address, reusePort: true });
      // Once it listens (a failure to listen rejects the start below, and is no event of the HTTP
      // server's): an accept error (ENOBUFS, …) reaches the HTTP server's listeners, as its own would.
      other.on("error", (err) => server.emit("error", err));
    }
  } catch (err) {
    // The start failed: what the first socket took is cut, not waited for.
    server.closeAllConnections();
    await closeAll(server, others);
    throw err;
  }
  return { close: () => closeAll(server, others) };
}

/**
 * One maxConnections over every socket: Node checks the HTTP server's own against what it accepted
 * itself, so it is lowered by what the others handed it; `hand` refuses beyond the limit, counting all.
 */
function oneLimit(server: Server, maxConnections: number): { hand: (socket: Socket) => void } {
  let open = 0;
  let handed = 0;
  server.prependListener("connection", (socket: Socket) => {
    open++;
    socket.once("close", () => open--);
  });
  const lower = (): void => void (server.maxConnections = Math.max(0, maxConnections - handed));
  lower();
  return {
    hand: (socket) => {
      if (open >= maxConnections) {
        // As Node drops one beyond its own maxConnections ("drop").
        server.emit("drop", {
          localAddress: socket.localAddress,
          localPort: socket.localPort,
          localFamily: socket.localFamily,
          remoteAddress: socket.remoteAddress,
          remotePort: socket.remotePort,
          remoteFamily: socket.remoteFamily,
        });
        socket.destroy();
        return;
      }
      handed++;
      lower();
      socket.once("close", () => {
        handed--;
        lower();
      });
      server.emit("connection", socket);
    },
  };
}

/** Fails as a plain listen would (EADDRINUSE) when something listens on host:port already. */
async function refuseIfTaken(host: string, port: number): Promise<void> {
  const probe = createNetServer();
  await listening(probe, { host, port, exclusive: true });
  await closed(probe);
}

function listening(
  server: NetServer,
  options: { host: string; port: number; backlog?: number; reusePort?: boolean; exclusive?: boolean },
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options, () => {
      server.off("error", reject);
      resolve();
    });
  });
}

/**
 * Stops every socket accepting; resolves once every connection has ended. Not through node:http's
 * own close(), which also closes its idle connections at once: serve()'s drain closes them itself,
 * once the connections admission control read again as the drain began have had a turn to deliver
 * their requests (admission/parking.ts). node:http's close() runs last, with every connection ended
 * — those the other sockets handed over too, which the server's own count leaves out: it stops the
 * server's checks of request timeouts (and emits `close` once more).
 */
async function closeAll(server: Server, others: readonly NetServer[]): Promise<void> {
  await Promise.all([server, ...others].map(closed));
  server.close();
}

/** Stops `server` accepting (net's close, not node:http's); resolves once the connections it accepted have ended (at once when it was not listening). */
function closed(server: NetServer): Promise<void> {
  return new Promise<void>((resolve) => NetServer.prototype.close.call(server, () => resolve()));
}
