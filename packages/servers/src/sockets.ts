import { once } from "node:events";
import { readFileSync } from "node:fs";
import { connect, createServer, type AddressInfo, type Socket } from "node:net";
import { performance } from "node:perf_hooks";

/**
 * Tests' views of TCP sockets, from outside the event loop: the kernel's socket tables, a stall of
 * the loop that lasts until answers wait unread, and a connected pair on loopback to send them over.
 * `@fenced/servers/sockets` loads nothing else of this package (no server, no client). Linux only.
 */

/** One row of the kernel's TCP tables (/proc/net/tcp and tcp6): addresses as it lists them (hex). */
export interface TcpSocket {
  /** ADDRESS, hex as the kernel lists it (byte order of the table). */
  readonly localAddress: string;
  readonly localPort: number;
  readonly remotePort: number;
  /** The kernel's state code: "0A" is LISTEN, "01" ESTABLISHED. */
  readonly state: string;
  /** Bytes received and not yet read by the process (on a LISTEN row: connections not yet accepted). */
  readonly unread: number;
}

/** Every TCP socket of this network namespace, IPv4 and IPv6 (a kernel without IPv6 has no tcp6 table). */
export function tcpSockets(): TcpSocket[] {
  return ["/proc/net/tcp", "/proc/net/tcp6"].flatMap((table) => {
    let text: string;
    try {
      text = readFileSync(table, "utf8");
    } catch (err) {
      if (table.endsWith("6") && (err as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw err;
    }
    return text
      .split("\n")
      .slice(1)
      .flatMap((line) => {
        // sl local_address rem_address st tx_queue:rx_queue …; an address is ADDRESS:PORT, all hex.
        const [, local, remote, state, queues] = line.trim().split(/\s+/);
        if (local === undefined || remote === undefined || state === undefined || queues === undefined) return [];
        const [localAddress = "", localPort = ""] = local.split(":");
        return [
          {
            localAddress,
            localPort: Number.parseInt(localPort, 16),
            remotePort: Number.parseInt(remote.split(":")[1] ?? "", 16),
            state,
            unread: Number.parseInt(queues.split(":")[1] ?? "", 16),
          },
        ];
      });
  });
}

/**
 * A stall of the event loop, as a long garbage collection or a host that took the CPU makes one: at
 * least `ms`, and on until bytes wait unread in every one of `sockets` (each known by its local and
 * remote ports) — answers that arrived during the stall, due on the same turn of the loop as the
 * timers that ran out meanwhile. Node runs those timers first, then reads the sockets. The stall ends
 * on the answers' arrival, not on a guess of how long they take. Throws past `limitMs` (an answer
 * that never came).
 */
export function stallUntilUnread(sockets: readonly Socket[], ms: number, limitMs = 10_000): void {
  const ends = sockets.map((socket) => {
    if (socket.localPort === undefined || socket.remotePort === undefined)
      throw new Error("a socket that is not connected has no answer to wait for");
    return `${socket.localPort}>${socket.remotePort}`;
  });
  const started = performance.now();
  const answered = (): boolean => {
    const waiting = new Set(tcpSockets().flatMap((s) => (s.unread > 0 ? [`${s.localPort}>${s.remotePort}`] : [])));
    return ends.every((end) => waiting.has(end));
  };
  let stalled = 0;
  while ((stalled = performance.now() - started) < ms || !answered())
    if (stalled > limitMs) throw new Error(`no answer waits unread in every socket after ${Math.round(stalled)} ms`);
}

/** Two connected ends on loopback: what `peer` writes, `client` receives. `close()` ends both and the listener. */
export async function connectedPair(): Promise<{ client: Socket; peer: Socket; close: () => void }> {
  const server = createServer();
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening));
  const accepted = once(server, "connection") as Promise<[Socket]>;
  const client = connect((server.address() as AddressInfo).port, "127.0.0.1");
  let peer: Socket;
  try {
    [, [peer]] = await Promise.all([once(client, "connect"), accepted]);
  } catch (err) {
    client.destroy();
    server.close();
    throw err;
  }
  return {
    client,
    peer,
    close: () => {
      client.destroy();
      peer.destroy();
      server.close();
    },
  };
}
