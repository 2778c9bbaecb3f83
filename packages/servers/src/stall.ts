import { readFileSync } from "node:fs";
import type { Socket } from "node:net";
import { performance } from "node:perf_hooks";

/**
 * A stall of the event loop, as a long garbage collection or a host that took the CPU makes one, for
 * the tests of what runs after it: at least `ms`, and on until bytes wait unread in every one of
 * `sockets` — answers that arrived during the stall, due on the same turn of the loop as the timers
 * that ran out meanwhile. Node runs those timers first, then reads the sockets. Whether a socket holds
 * unread bytes is read from the kernel's tables (/proc/net/tcp and tcp6: rx_queue), so the stall ends
 * on the answers' arrival, not on a guess of how long they take. Throws past `limitMs` (an answer
 * that never came). `@fenced/servers/stall` loads nothing else of this package. Linux only.
 */
export function stallUntilUnread(sockets: readonly Socket[], ms: number, limitMs = 10_000): void {
  const ports = sockets.map((socket) => portHex(socket.localPort));
  const started = performance.now();
  let stalled = 0;
  while ((stalled = performance.now() - started) < ms || !ports.every((port) => unreadPorts().has(port)))
    if (stalled > limitMs) throw new Error(`no answer waits unread in every socket after ${Math.round(stalled)} ms`);
}

function portHex(port: number | undefined): string {
  if (port === undefined) throw new Error("a socket that is not connected has no answer to wait for");
  return port.toString(16).toUpperCase().padStart(4, "0");
}

/** The local ports (hex, as the kernel lists them) of the TCP sockets whose receive queue holds bytes. */
function unreadPorts(): Set<string> {
  const ports = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"])
    for (const line of readFileSync(table, "utf8").split("\n").slice(1)) {
      // sl local_address rem_address st tx_queue:rx_queue …; an address is ADDRESS:PORT, the queues hex.
      const [, local, , , queues] = line.trim().split(/\s+/);
      if (local !== undefined && Number.parseInt(queues?.split(":")[1] ?? "0", 16) > 0) ports.add(local.split(":")[1] ?? "");
    }
  return ports;
}
