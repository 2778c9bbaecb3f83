// Parked connections (parking.ts) on real loopback sockets, without an HTTP server: which connection
// is parked, and which is read again when. The gateway's own tests (../overload.test.ts) run the
// same over HTTP against real backends.
import type { Socket } from "node:net";
import { once } from "node:events";
import { connectedPair } from "@fenced/servers/sockets";
import { afterEach, describe, expect, it, onTestFinished, vi } from "vitest";
import { Parking, SWEEP_MS, type ParkingSettings } from "./parking.js";

const pairs: (() => void)[] = [];
const READ_MS = 5_000;
afterEach(() => {
  for (const close of pairs.splice(0)) close();
});

/** The gateway's end of a fresh loopback connection, and its client's. */
type Conn = { socket: Socket; client: Socket };
async function connection(): Promise<Conn> {
  const { client, peer, close } = await connectedPair();
  pairs.push(close);
  return { socket: peer, client };
}

function parking(room: ParkingSettings<string>["room"], more: Partial<ParkingSettings<string>> = {}): Parking<string> {
  const p = new Parking<string>({ room, keepingUp: () => false, maxParkMs: 60_000, ...more });
  pairs.push(() => p.stop());
  return p;
}

/**
 * Whether the gateway's end reads what its client sends: a byte written arrives, or not within `ms`
 * (50: a parked connection's byte would have arrived long before; READ_MS: as long as a busy machine
 * may take to deliver one, for a connection that must be read).
 */
async function reads(c: { socket: Socket; client: Socket }, ms = 50): Promise<boolean> {
  const arrived = once(c.socket, "data").then(() => true);
  c.client.write("x");
  return Promise.race([arrived, new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);
}

describe("parked connections", () => {
  it("reads on a served connection while its family has room and nobody is parked", async () => {
    const c = await connection();
    const p = parking(() => 1);
    p.answered(c.socket, "a", "records", true);
    expect(p.size).toBe(0);
    expect(await reads(c, READ_MS)).toBe(true);
  });

  it("parks a refused connection until a slot of its family frees, never a served one of another key", async () => {
    const [refused, served] = [await connection(), await connection()];
    let room = 0;
    const p = parking(() => room);
    p.answered(refused.socket, "a", "records", false);
    // Served while another key's connection is parked, its family full: it is read on all the same.
    p.answered(served.socket, "b", "records", true);
    expect(p.size).toBe(1);
    expect(await reads(served, READ_MS)).toBe(true);
    expect(await reads(refused)).toBe(false);
    // A slot frees: the parked one is read again, and what its client sent meanwhile arrives.
    room = 1;
    const arrived = once(refused.socket, "data");
    p.answered(null, "c", "records", true);
    expect(refused.socket.isPaused()).toBe(false);
    await arrived;
  });

  it("parks a served connection behind its own key's parked ones, and reads the longest parked in its place", async () => {
    const [refused, served] = [await connection(), await connection()];
    const p = parking(() => 1);
    p.answered(refused.socket, "a", "records", false);
    p.answered(served.socket, "a", "records", true);
    expect(refused.socket.isPaused()).toBe(false);
    expect(p.size).toBe(1);
    expect(await reads(served)).toBe(false);
    // Its turn: the next slot freed reads it.
    const arrived = once(served.socket, "data");
    p.answered(null, "b", "records", true);
    await arrived;
    expect(p.size).toBe(0);
  });

  it("parks a served connection only behind its key's parked connections of its own family", async () => {
    const [objects, records] = [await connection(), await connection()];
    const p = parking(() => 0);
    p.answered(objects.socket, "a", "objects", false);
    p.answered(records.socket, "a", "records", true);
    expect(p.size).toBe(1);
    expect(await reads(records, READ_MS)).toBe(true);
  });

  it("parks a served connection only when its key has at least its share of the family's parked connections", async () => {
    const cs = await Promise.all(Array.from({ length: 6 }, connection));
    const [b1, b2, b3, s1, bigServed, smallServed] = cs as [Conn, Conn, Conn, Conn, Conn, Conn];
    const p = parking(() => 0);
    for (const c of [b1, b2, b3]) p.answered(c.socket, "big", "records", false);
    p.answered(s1.socket, "small", "records", false);
    // One parked against an average of two: the small key's served connection is read on.
    p.answered(smallServed.socket, "small", "records", true);
    expect(p.size).toBe(4);
    expect(await reads(smallServed, READ_MS)).toBe(true);
    p.answered(bigServed.socket, "big", "records", true);
    expect(p.size).toBe(5);
    expect(await reads(bigServed)).toBe(false);
  });

  it("parks no served connection once every parked one of its family has been read again", async () => {
    const [refused, served] = [await connection(), await connection()];
    const p = parking(() => 1);
    p.answered(refused.socket, "a", "records", false);
    p.answered(null, "b", "records", true);
    expect(p.size).toBe(0);
    p.answered(served.socket, "c", "records", true);
    expect(p.size).toBe(0);
    expect(await reads(served, READ_MS)).toBe(true);
  });

  it("counts a connection read again against the room until the next sweep: the loop's timers run before its poll, so its request may not have arrived", async () => {
    const [refused, served] = [await connection(), await connection()];
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
    onTestFinished(() => void vi.useRealTimers());
    // The room stays 1: the request of the connection read again never arrives here.
    const p = parking(() => 1, { keepingUp: () => true });
    p.answered(refused.socket, "a", "records", false);
    p.answered(served.socket, "a", "records", true);
    expect(refused.socket.isPaused()).toBe(false);
    vi.advanceTimersByTime(SWEEP_MS);
    expect(served.socket.isPaused()).toBe(true);
    vi.advanceTimersByTime(SWEEP_MS);
    expect(served.socket.isPaused()).toBe(false);
  });

  it("reads parked connections again in turn across keys, each key's in the order parked, one per freed slot", async () => {
    const cs = await Promise.all(Array.from({ length: 4 }, connection));
    const names = ["a1", "a2", "a3", "b1"];
    const p = parking(() => 1);
    cs.forEach((c, i) => p.answered(c.socket, (names[i] as string)[0] as string, "records", false));
    const order: string[] = [];
    for (let i = 0; i < 4; i++) {
      const before = cs.filter((c) => c.socket.isPaused());
      p.answered(null, "a", "records", true);
      order.push(...before.filter((c) => !c.socket.isPaused()).map((c) => names[cs.indexOf(c)] as string));
    }
    expect(order).toEqual(["a1", "b1", "a2", "a3"]);
  });

  it("passes over a key with no room for its request, which keeps its turn: the next key in turn with room is read", async () => {
    const cs = await Promise.all(Array.from({ length: 4 }, connection));
    const names = ["a1", "b1", "c1", "a2"];
    // Key a has no room (a request of its own waits in the queue); b and c have.
    const room: Record<string, number> = { a: 0, b: 1, c: 1 };
    const p = parking((_family, key) => room[key] ?? 0);
    cs.forEach((c, i) => p.answered(c.socket, (names[i] as string)[0] as string, "records", false));
    const readNow = (): string[] => cs.filter((c) => !c.socket.isPaused()).map((c) => names[cs.indexOf(c)] as string);
    p.answered(null, "b", "records", true);
    expect(readNow()).toEqual(["b1"]);
    // Key a has room again: still first in turn, ahead of c.
    room.a = 1;
    p.answered(null, "b", "records", true);
    expect(readNow()).toEqual(["a1", "b1"]);
    p.answered(null, "b", "records", true);
    expect(readNow()).toEqual(["a1", "b1", "c1"]);
    // Nobody with room: a slot that frees reads nobody.
    room.a = 0;
    p.answered(null, "b", "records", true);
    expect(readNow()).toEqual(["a1", "b1", "c1"]);
  });

  it("reads every connection parked for maxParkMs again, room or not", async () => {
    const c = await connection();
    const p = parking(() => 0, { maxParkMs: 40 });
    const parked = performance.now();
    p.answered(c.socket, "a", "records", false);
    await expect.poll(() => c.socket.isPaused(), { interval: 5, timeout: 5_000 }).toBe(false);
    expect(performance.now() - parked).toBeGreaterThanOrEqual(40);
    expect(p.size).toBe(0);
  });

  it("reads a connection parked maxParkMs ago even when one parked before it was read meanwhile", async () => {
    const [first, second] = [await connection(), await connection()];
    let room = 0;
    const p = parking(() => room, { maxParkMs: 40 });
    p.answered(first.socket, "a", "records", false);
    p.answered(second.socket, "a", "records", false);
    room = 1;
    p.answered(null, "b", "records", true);
    expect(first.socket.isPaused()).toBe(false);
    room = 0;
    await expect.poll(() => second.socket.isPaused(), { interval: 5, timeout: 5_000 }).toBe(false);
  });

  it("while the gateway keeps up, reads as many parked connections as there is room for, no more", async () => {
    const cs = await Promise.all(Array.from({ length: 3 }, connection));
    let keepingUp = false;
    const p = parking(() => 2, { keepingUp: () => keepingUp });
    for (const c of cs) p.answered(c.socket, "a", "records", false);
    // Behind: room or not, none is read before its time.
    await new Promise((r) => setTimeout(r, 50));
    expect(p.size).toBe(3);
    keepingUp = true;
    await expect.poll(() => p.size, { interval: 5, timeout: 5_000 }).toBe(1);
  });

  it("forgets a parked connection its client closes, and reads every one still parked when stopped", async () => {
    const [gone, kept, served] = [await connection(), await connection(), await connection()];
    const p = parking(() => 0);
    p.answered(gone.socket, "g", "records", false);
    p.answered(kept.socket, "a", "records", false);
    gone.client.destroy();
    await expect.poll(() => p.size, { interval: 5, timeout: 5_000 }).toBe(1);
    // Its key has none parked now: its served connection is read on.
    p.answered(served.socket, "g", "records", true);
    expect(p.size).toBe(1);
    p.stop();
    expect(p.size).toBe(0);
    expect(await reads(kept, READ_MS)).toBe(true);
  });

  it("suspends a parked connection's idle timeout (the server's keep-alive: its client has sent, or may have), and gives it back when read again", async () => {
    const c = await connection();
    let timedOut = false;
    c.socket.setTimeout(30, () => {
      timedOut = true;
    });
    let room = 0;
    const p = parking(() => room);
    p.answered(c.socket, "a", "records", false);
    await new Promise((r) => setTimeout(r, 150));
    expect(timedOut).toBe(false);
    room = 1;
    p.answered((await connection()).socket, "b", "records", true);
    expect(c.socket.isPaused()).toBe(false);
    expect(c.socket.timeout).toBe(30);
    await expect.poll(() => timedOut, { interval: 5, timeout: 5_000 }).toBe(true);
  });

  it("parks a connection once, however many of its requests are answered meanwhile (pipelined)", async () => {
    const c = await connection();
    let room = 0;
    const p = parking(() => room);
    p.answered(c.socket, "a", "records", false);
    p.answered(c.socket, "a", "records", false);
    expect(p.size).toBe(1);
    room = 1;
    p.answered(null, "b", "records", true);
    expect(p.size).toBe(0);
    expect(c.socket.isPaused()).toBe(false);
  });

  it("parks none once stopped (the gateway drains), and reads those parked before", async () => {
    const [before, after] = [await connection(), await connection()];
    const p = parking(() => 0);
    p.answered(before.socket, "a", "records", false);
    p.stop();
    p.answered(after.socket, "a", "records", false);
    expect(p.size).toBe(0);
    expect(before.socket.isPaused()).toBe(false);
    expect(after.socket.isPaused()).toBe(false);
  });

  it("never parks a connection that is closing", async () => {
    const c = await connection();
    c.socket.end();
    const p = parking(() => 0);
    p.answered(c.socket, "a", "records", false);
    expect(p.size).toBe(0);
  });
});
