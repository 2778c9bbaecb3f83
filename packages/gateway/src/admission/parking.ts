import type { Socket } from "node:net";
import { performance } from "node:perf_hooks";
import { FairQueue } from "./fair-queue.js";

/**
 * Parked connections: backpressure per connection. HTTP/1.1 sends a connection's next request only
 * after its answer, so a connection the gateway does not read is a client that waits, its request in
 * the kernel's socket buffer, at no cost to the gateway; a request read and refused costs about a
 * fifth of a write, and its client sends the next one at once. So once a refusal is out, its
 * connection is parked — not read (what is left of a refused body too). A served connection is
 * parked only while its own key has connections of the family parked, at least as many as the keys
 * with some parked have on average: it takes its turn behind them, so that a key's closed loop over
 * more connections than there is room for trades places instead of reading a parked connection into
 * a refusal (the served one's next request would take the freed slot first). A key with fewer than
 * that is read on, so another key's flood never holds it up. Parked connections are read again in turn
 * across API keys, each key's in the order parked, a key with no room passed over (it keeps its
 * turn): one for each slot a request's end frees while there is room for it (`room`: a free slot,
 * or a place in the queue for a key with nothing waiting there), as many as there is room for
 * while the gateway keeps up with its own work, and every one that has waited `maxParkMs` (the
 * refusal's Retry-After), room or not.
 *
 * It only decides when a connection is read: no fence, token or write depends on it. A request read
 * is judged as before; a request on a parked connection (a lease's extension too) waits at most
 * `maxParkMs` and one sweep before it is read.
 */

/** How often parked connections are looked at (those past maxParkMs; all that fit while the gateway keeps up). */
export const SWEEP_MS = 10;

export interface ParkingSettings<F> {
  /** The parked connections of `key` family `family` can read now without refusing their requests (gate.ts' roomFor). */
  readonly room: (family: F, key: string) => number;
  /** Whether the gateway keeps up with its own work (the fair share binds nobody, or nothing is in flight): parked connections are then read as they fit. */
  readonly keepingUp: () => boolean;
  /** The longest a connection stays parked before it is read again, room or not. */
  readonly maxParkMs: number;
}

interface Parked<F> {
  readonly socket: Socket;
  readonly key: string;
  /** The family of its last request: the room its next one most likely needs. */
  readonly family: F;
  readonly since: number;
  /** Its idle timeout when parked (the server's keep-alive), suspended while parked: its client has sent, or may have. */
  readonly timeout: number | undefined;
  readonly gone: () => void;
  parked: boolean;
}

export class Parking<F> {
  /** In turn across keys (one priority level). */
  readonly #turns = new FairQueue<Parked<F>>(1);
  /** Every connection in the order parked, the longest parked first; those read again meanwhile are skipped. */
  #byAge: Parked<F>[] = [];
  #head = 0;
  #timer: NodeJS.Timeout | undefined;
  /** The sockets parked now: a connection's pipelined requests, each answered, park it once. */
  readonly #sockets = new WeakSet<Socket>();
  /** Connections parked now, per family: in all, and per key. */
  readonly #waiting = new Map<F, { all: number; readonly keys: Map<string, number> }>();
  /**
   * Connections read again since the last sweep. The loop's timers run before its poll, so a sweep
   * may come before a connection read again has had its request read: until then that request's
   * room is not taken, and the sweep counts each such read against the room (one that has arrived
   * is counted twice, and waits for the next sweep).
   */
  #readSinceSweep = 0;
  #stopped = false;

  constructor(readonly settings: ParkingSettings<F>) {}

  /** Connections parked now. */
  get size(): number {
    return this.#turns.size;
  }

  /**
   * A request of `key` on `socket` has been answered (its response is over): `freed` when it held a
   * slot of `family` (admitted, and now released) — the next connection in turn is then read, if
   * the family has room, and this one parked behind it if its key has at least its share of the
   * family's parked connections — false when it was refused: its connection is parked.
   */
  answered(socket: Socket | null, key: string, family: F, freed: boolean): void {
    // Its key has connections of the family parked, at least its share of them: a served one takes its turn behind them (below).
    const behind = freed && this.#overShare(family, key);
    // One for the slot it freed: the first in turn with room for its request (a key passed over keeps its turn).
    if (freed && this.#turns.size > 0) this.#readNext(0);
    if ((!freed || behind) && socket !== null && parkable(socket)) this.#park(socket, key, family);
  }

  /** Reads every parked connection again, and parks none from now on: the gateway closes. */
  stop(): void {
    this.#stopped = true;
    clearInterval(this.#timer);
    this.#timer = undefined;
    while (this.#readNext());
  }

  #park(socket: Socket, key: string, family: F): void {
    if (this.#stopped || this.#sockets.has(socket)) return;
    this.#sockets.add(socket);
    const entry: Parked<F> = {
      socket,
      key,
      family,
      since: performance.now(),
      timeout: socket.timeout,
      gone: () => this.#forget(entry),
      parked: true,
    };
    stopReading(socket);
    if (entry.timeout) socket.setTimeout(0);
    socket.once("close", entry.gone);
    this.#turns.push(0, key, entry);
    this.#count(entry, 1);
    this.#byAge.push(entry);
    this.#timer ??= setInterval(() => this.#sweep(), SWEEP_MS).unref();
  }

  /**
   * Reads the next connection in turn again, the first whose request has more than `over` of room
   * (any, without `over`); false when none is.
   */
  #readNext(over?: number): boolean {
    const entry = this.#turns.shift(over === undefined ? undefined : (next) => this.settings.room(next.family, next.key) > over);
    if (entry === undefined) return false;
    this.#unpark(entry);
    return true;
  }

  #unpark(entry: Parked<F>): void {
    entry.parked = false;
    this.#count(entry, -1);
    this.#readSinceSweep++;
    this.#sockets.delete(entry.socket);
    entry.socket.off("close", entry.gone);
    if (entry.timeout) entry.socket.setTimeout(entry.timeout);
    startReading(entry.socket);
    if (this.#turns.size === 0) this.#idle();
  }

  /** Its client closed the connection while parked. */
  #forget(entry: Parked<F>): void {
    if (!entry.parked || !this.#turns.remove(0, entry.key, entry)) return;
    entry.parked = false;
    this.#count(entry, -1);
    this.#sockets.delete(entry.socket);
    if (this.#turns.size === 0) this.#idle();
  }

  /** Nobody parked: no sweep, and the age list let go. */
  #idle(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#byAge = [];
    this.#head = 0;
  }

  #sweep(): void {
    const oldest = performance.now() - this.settings.maxParkMs;
    for (
      let entry = this.#byAge[this.#head];
      entry !== undefined && (!entry.parked || entry.since <= oldest);
      entry = this.#byAge[this.#head]
    ) {
      this.#head++;
      if (entry.parked && this.#turns.remove(0, entry.key, entry)) this.#unpark(entry);
    }
    if (this.#head > 1024 && this.#head * 2 > this.#byAge.length) {
      this.#byAge = this.#byAge.slice(this.#head);
      this.#head = 0;
    }
    // As many as there is room for now, less those read again whose requests may not have arrived;
    // in turn, a key with no room for its request passed over (it keeps its turn).
    if (this.settings.keepingUp()) while (this.#readNext(this.#readSinceSweep));
    this.#readSinceSweep = 0;
  }

  /** Whether `key` has connections of `family` parked, and at least as many as the keys with some there have on average. */
  #overShare(family: F, key: string): boolean {
    const waiting = this.#waiting.get(family);
    const mine = waiting?.keys.get(key) ?? 0;
    return waiting !== undefined && mine > 0 && mine * waiting.keys.size >= waiting.all;
  }

  #count(entry: Parked<F>, by: 1 | -1): void {
    let waiting = this.#waiting.get(entry.family);
    if (waiting === undefined) this.#waiting.set(entry.family, (waiting = { all: 0, keys: new Map<string, number>() }));
    waiting.all += by;
    const n = (waiting.keys.get(entry.key) ?? 0) + by;
    if (n === 0) waiting.keys.delete(entry.key);
    else waiting.keys.set(entry.key, n);
  }
}

/** A connection that will carry another request: open both ways (a response that closes its connection ends it). */
function parkable(socket: Socket): boolean {
  return !socket.destroyed && socket.readable && socket.writable;
}

/**
 * Node's HTTP server's own mark of a connection it has stopped reading (set while a client's
 * pipelined requests outrun their answers): with it set, the server itself keeps the connection
 * stopped — its resume after an answer, and a request body's, both check it — until startReading
 * clears it, as the server does once its answers drain.
 */
type ServerSocket = Socket & { _paused?: boolean; parser?: { resume(): void } | null };

function stopReading(socket: Socket): void {
  (socket as ServerSocket)._paused = true;
  socket.pause();
}

function startReading(socket: Socket): void {
  const s = socket as ServerSocket;
  s._paused = false;
  s.parser?.resume();
  s.resume();
}
