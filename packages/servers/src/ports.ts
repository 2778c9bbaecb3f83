import { randomBytes, randomInt } from "node:crypto";
import { closeSync, linkSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * Ports for the servers the tests start. A fault kills a server and restarts it on the same port, so
 * a port must stay its own while it is down — two rules keep it so:
 * - **Outside the kernel's ephemeral range** (`ip_local_port_range`). The kernel hands those ports to
 *   every `listen(0)` and to the local end of every outgoing connection, of every process: a port
 *   picked there and left free by a kill can be in another socket's hands by the restart. (A CI run
 *   saw a chaos run's restarted radosgw fail to bind while another test file's radosgw answered on its
 *   port: every request was refused with `InvalidAccessKeyId`.)
 * - **Reserved across processes**: a file per port under `tmpdir()/fenced-ports`, created exclusively,
 *   holding the owner's pid; removed when the owner exits, taken over once its process is gone.
 *
 * A port stays reserved until its process exits, so a server started later never takes the port of a
 * server stopped earlier in the same file.
 */

const DIR = join(tmpdir(), "fenced-ports");
/** The lowest port handed out: clear of the well-known ports and of what developers run by hand. */
const FLOOR = 15_000;

export interface PortRange {
  readonly lo: number;
  readonly hi: number;
}

/** The kernel's ephemeral range, or Linux's default where it cannot be read. */
export function ephemeralRange(): PortRange {
  try {
    const [lo, hi] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
    if (lo !== undefined && hi !== undefined && Number.isInteger(lo) && Number.isInteger(hi)) return { lo, hi };
  } catch {
    // not Linux
  }
  return { lo: 32_768, hi: 60_999 };
}

/** Where freePort picks: below the ephemeral range if there is room, else above it. */
export function reservedRange(ephemeral: PortRange = ephemeralRange()): PortRange {
  if (ephemeral.lo - 1 - FLOOR >= 1_000) return { lo: FLOOR, hi: ephemeral.lo - 1 };
  if (65_535 - ephemeral.hi >= 1_000) return { lo: ephemeral.hi + 1, hi: 65_535 };
  throw new Error(`the ephemeral port range ${ephemeral.lo}-${ephemeral.hi} leaves no room for test servers' ports`);
}

/** A TCP port on 127.0.0.1, free now and reserved for this process until it exits. */
export async function freePort(range: PortRange = reservedRange()): Promise<number> {
  mkdirSync(DIR, { recursive: true });
  const size = range.hi - range.lo + 1;
  const start = randomInt(size);
  for (let i = 0; i < size; i++) {
    const port = range.lo + ((start + i) % size);
    if (!reserve(port)) continue;
    // A socket outside our reservations (a server run by hand) may hold it.
    if (await bindable(port)) return port;
    release(port);
  }
  throw new Error(`no free port in ${range.lo}-${range.hi}`);
}

const held = new Set<number>();
let exitHooked = false;

const fileOf = (port: number): string => join(DIR, String(port));

/** Creates the port's file, exclusively; a file whose process is gone is taken over first. */
function reserve(port: number): boolean {
  takeOverIfStale(fileOf(port));
  let fd: number;
  try {
    fd = openSync(fileOf(port), "wx");
  } catch {
    return false; // another live process holds it
  }
  try {
    writeSync(fd, String(process.pid));
  } finally {
    closeSync(fd);
  }
  held.add(port);
  if (!exitHooked) {
    exitHooked = true;
    process.once("exit", () => {
      for (const p of held) release(p);
    });
  }
  return true;
}

function release(port: number): void {
  held.delete(port);
  if (holderOf(fileOf(port)) === process.pid) rmSync(fileOf(port), { force: true });
}

/**
 * Removes a reservation whose process is gone. The rename is atomic, so of several processes taking
 * the same file over one moves it; if what it moved was by then another process's fresh reservation
 * (taken over and re-created between our read and our rename), it is linked back — `link` never
 * replaces a file, so a reservation created meanwhile is never lost either.
 */
function takeOverIfStale(file: string): void {
  const holder = holderOf(file);
  if (holder === undefined || alive(holder)) return;
  const moved = `${file}.${process.pid}.${randomBytes(4).toString("hex")}`;
  try {
    renameSync(file, moved);
  } catch {
    return; // another process moved it first
  }
  if (holderOf(moved) !== holder) {
    try {
      linkSync(moved, file);
    } catch {
      // a third reservation is in place: it stands
    }
  }
  rmSync(moved, { force: true });
}

/** The pid in a reservation file; 0 for one still being written (held); undefined when there is none. */
function holderOf(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, "utf8"));
    return Number.isInteger(pid) && pid > 0 ? pid : 0;
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  if (pid === 0) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}
