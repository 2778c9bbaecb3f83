import { createServer, IncomingMessage, ServerResponse, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { performance } from "node:perf_hooks";
import type { Express, Request, Response } from "express";
import { clientErrorListener } from "./client-errors.js";
import { InFlight } from "./in-flight.js";
import { listenOn, type Listening } from "./listeners.js";

/**
 * The server's limits unless told otherwise. Each bounds what one client can hold:
 * - keepAliveTimeoutMs: an idle keep-alive connection. Longer than a load balancer's idle timeout
 *   (60 s on common ones), so that the balancer, not the gateway, closes an idle connection: a
 *   request it sends on a connection the gateway is closing at that moment would fail.
 * - headersTimeoutMs: receiving one request's headers (a client trickling headers is cut).
 * - requestTimeoutMs: receiving one whole request, body included. At 10 min, an object of the
 *   default 5 GiB limit needs about 9 MB/s; raise it for larger or slower uploads.
 * - maxConnections: open connections; beyond it, new ones are closed at once.
 * - listenBacklog: connections the kernel holds until the gateway accepts them (capped by the
 *   kernel's net.core.somaxconn, 4,096 by default since Linux 5.4). Node's own default, 511, is
 *   overrun by a burst of new connections (clients starting together, a load balancer's pool after a
 *   restart): the kernel drops each extra one, and its client waits for a SYN retransmission — one
 *   second, then three, then seven — while nobody is busy (measured: docs/benchmarks.md, Overload).
 *   Each listening socket (acceptors) has a queue of its own of this length.
 * - acceptors: listening sockets on the port (more than 1 on Linux only). libuv accepts one
 *   connection per listening socket each time the event loop polls, so a busy gateway with one
 *   accepts a burst of new connections at 30–100 a second while their requests wait unseen in the
 *   kernel (http/listeners.ts). More sockets see those requests at once; but against clients that
 *   send again as soon as they are refused, reading every request leaves the writes already taken
 *   less of each turn of the loop (at 2× capacity, 64 sockets: slowest answer about 1.8 s against
 *   4.6 s, but about a third of capacity accepted against about a half; docs/benchmarks.md). Node's
 *   1 stays the default.
 * - checkIntervalMs: how often Node checks the header and request deadlines, so how late past a
 *   deadline a connection can be cut.
 */
export const SERVER_DEFAULTS = {
  keepAliveTimeoutMs: 65_000,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 600_000,
  maxConnections: 4_096,
  listenBacklog: 4_096,
  acceptors: 1,
  checkIntervalMs: 1_000,
} as const;

export interface ServeOptions {
  readonly host?: string | undefined;
  /** 0 picks a free port (see `port` on the result). */
  readonly port?: number | undefined;
  /** How long an idle keep-alive connection stays open. Default 65 s (SERVER_DEFAULTS). */
  readonly keepAliveTimeoutMs?: number | undefined;
  /** Longest time to receive one request's headers. Default 10 s. */
  readonly headersTimeoutMs?: number | undefined;
  /** Longest time to receive one whole request, body included: bounds slow uploads. Default 10 min. */
  readonly requestTimeoutMs?: number | undefined;
  /** Open connections at most; more are closed as they arrive. Default 4,096. */
  readonly maxConnections?: number | undefined;
  /** Connections waiting to be accepted at most (the kernel caps it at net.core.somaxconn). Default 4,096. */
  readonly listenBacklog?: number | undefined;
  /** Listening sockets on the port (Linux; elsewhere 1): each adds an accept to every turn of the event loop (http/listeners.ts). Default 1. */
  readonly acceptors?: number | undefined;
  /** How often the header and request deadlines are checked. Default 1 s. */
  readonly checkIntervalMs?: number | undefined;
  /** How long disposal (`await using`) drains before cutting what is left. Default 30 s. */
  readonly disposeDrainTimeoutMs?: number | undefined;
}

export interface Serving {
  /** The node:http server. With `acceptors` above 1 it has other listening sockets: stop it with drain(), not server.close(). */
  readonly server: Server;
  readonly host: string;
  readonly port: number;
  /** Requests being served right now. */
  inFlight(): number;
  /**
   * Graceful stop: no new connections; the app's drain hook first (onDrain: admission control's
   * parked connections read again); idle keep-alive connections closed after the loop's next poll;
   * every request in flight runs to completion and its connection closes after the response.
   * Resolves true once the last one is done, or false after `timeoutMs`, when whatever is left is cut.
   */
  drain(timeoutMs: number): Promise<boolean>;
  /** `await using serving = await serve(app, …)`: drains with the default timeout when the scope ends. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Request and response classes whose instances are born with the app's prototypes. Express gives
 * every request and response its own prototype (Object.setPrototypeOf) on arrival; done to a live
 * object, that changes its hidden class, and Node's HTTP code then runs megamorphic on every request,
 * which about doubles the CPU time a request costs. Born with the prototype, the switch is a no-op.
 * Each is built by Node's own constructor (Reflect.construct with this one as new.target), so it is
 * laid out as Node's: a function that calls the constructor on `this` makes objects sized for its own
 * empty body, and every request then moved Node's ~40 fields out of the object as they were added
 * (measured: about 5 µs a request, a sixth of a refusal). On the supported Node lines V8 keeps one
 * hidden class per new.target prototype for this (Node 20's made a new one each time).
 */
function expressClasses(app: Express): { IncomingMessage: typeof IncomingMessage; ServerResponse: typeof ServerResponse } {
  function Request(socket: Socket): IncomingMessage {
    return Reflect.construct(IncomingMessage, [socket], Request) as IncomingMessage;
  }
  Request.prototype = app.request;
  function Response(req: IncomingMessage, options?: unknown): ServerResponse {
    return Reflect.construct(ServerResponse, [req, options], Response) as ServerResponse;
  }
  Response.prototype = app.response;
  return { IncomingMessage: Request as unknown as typeof IncomingMessage, ServerResponse: Response as unknown as typeof ServerResponse };
}

/** Responses the drain cut at its deadline: the accounting tells them from a client that went away. */
const cutByDrain = new WeakSet<ServerResponse>();

/** Whether the drain cut this response (its connection closed at the drain's deadline). */
export function wasCutByDrain(res: ServerResponse): boolean {
  return cutByDrain.has(res);
}

/** How long `await using` lets requests in flight finish before cutting them. */
const DEFAULT_DISPOSE_DRAIN_MS = 30_000;

/**
 * A handler that sees every request before the app: admission control, whose refusals under overload
 * must cost about what node:http itself takes (admission/gate.ts). It answers the request itself, or
 * calls `next` — at once or later — to hand it to the app.
 */
export type EarlyHandler = (req: Request, res: Response, next: () => void) => void;

const EARLY = new WeakMap<Express, EarlyHandler>();

/** Asks serve() to call `early` before `app` for every request (createGateway does, for admission control). */
export function setEarlyHandler(app: Express, early: EarlyHandler): void {
  EARLY.set(app, early);
}

const DRAIN_HOOKS = new WeakMap<Express, () => void>();

/**
 * Asks serve()'s drain to call `hook` first, before it closes idle connections (createGateway does:
 * admission control reads its parked connections again, so that a request waiting on one is read and
 * answered rather than cut as idle).
 */
export function onDrain(app: Express, hook: () => void): void {
  DRAIN_HOOKS.set(app, hook);
}

/**
 * What the app does when a connection could not be accepted (an `error` event of the server, syscall
 * "accept": ENFILE, ENOBUFS — the host out of descriptors or memory). That connection is lost; the
 * server goes on accepting. Node throws an `error` event nobody listens for, which would end the
 * process: serve() always listens for it, and tells the app's hook (createGateway logs it).
 */
export type AcceptErrorHook = (err: Error) => void;

const ACCEPT_ERRORS = new WeakMap<Express, AcceptErrorHook>();

/** Sets the hook serve() calls when a connection to this app's server could not be accepted. */
export function onAcceptError(app: Express, hook: AcceptErrorHook): void {
  ACCEPT_ERRORS.set(app, hook);
}

/** The `error` listener of a server serving `app`: an accept error to the app's hook. A failure to listen (syscall "listen", "bind") rejects listenOn() instead. */
function acceptErrorListener(app: Express): (err: NodeJS.ErrnoException) => void {
  return (err) => {
    if (err.syscall === "accept") ACCEPT_ERRORS.get(app)?.(err);
  };
}

/**
 * "close" listeners on one response before Node warns of a leak. Each layer that waits for a
 * response's end adds one: serve()'s tracker, admission control's slot and queue wait, the
 * accounting, the client-gone signal of each store call, express, and a streamed body's pipeline
 * (several) — 11 on a queued object GET. They go with the response, so past Node's 10 the warning
 * would be noise; 32 still flags a real leak.
 */
const RESPONSE_MAX_LISTENERS = 32;

const ARRIVED = Symbol("fenced.http.arrived");
type Arrived = IncomingMessage & { [ARRIVED]?: number };

/** When serve() saw the request (performance.now()): its time includes any wait before the app ran it. */
export function arrivalOf(req: IncomingMessage): number | undefined {
  return (req as Arrived)[ARRIVED];
}

/** Per connection, its pipelined responses still waiting for their turn (closeWithConnection). */
const waitingTurn = new WeakMap<Socket, InFlight<ServerResponse>>();

/**
 * Ends `res` with its connection: Node 22 never emits "close" on a pipelined request's response whose
 * connection closed before its turn (Node 24 does), and what waits for it — admission control's slot,
 * the request's accounting, the drain's count — would wait forever. Only a response waiting for its
 * turn (no connection yet) is tracked, and one listener per connection serves all of them, so that a
 * long keep-alive connection does not gather listeners and a response's own "close" listeners stay few.
 */
function closeWithConnection(req: IncomingMessage, res: ServerResponse): void {
  // Not pipelined: the response has its connection already, and Node closes it with it.
  if (res.socket !== null) return;
  const waiting = waitingTurnOn(req.socket);
  const slot = waiting.add(res);
  res.once("close", () => waiting.remove(slot, res));
}

/** The connection's responses waiting for their turn; the first time, with the listener that ends them with it. */
function waitingTurnOn(socket: Socket): InFlight<ServerResponse> {
  const known = waitingTurn.get(socket);
  if (known !== undefined) return known;
  const waiting = new InFlight<ServerResponse>();
  waitingTurn.set(socket, waiting);
  socket.once("close", () => {
    // After Node's own handling of the connection's end (a tick later), each response still open is
    // ended as Node 24 ends it: destroyed, `closed` (what waits for "close" may look there first:
    // admission control's hold, the accounting), then "close". Each on a turn of its own, as Node 24
    // ends each on a tick of its own.
    for (const [slot, res] of waiting.entries())
      setImmediate(() => {
        if (!waiting.holds(slot, res)) return;
        res.destroy();
        Object.defineProperty(res, "closed", { value: true, configurable: true });
        res.emit("close");
      });
  });
  return waiting;
}

/** Serves the app on a node:http server that knows its requests, so that it can drain them. */
export async function serve(app: Express, options: ServeOptions = {}): Promise<Serving> {
  // The tracker listens before the app, so that it sees each request before any response can start.
  const server = createServer({
    ...expressClasses(app),
    // Node's defaults (60 s of headers, checked every 30 s) let a trickling client hold a socket for up to 90 s.
    headersTimeout: options.headersTimeoutMs ?? SERVER_DEFAULTS.headersTimeoutMs,
    // Never 0: that would let a trickling body hold a socket forever.
    requestTimeout: options.requestTimeoutMs ?? SERVER_DEFAULTS.requestTimeoutMs,
    connectionsCheckingInterval: options.checkIntervalMs ?? SERVER_DEFAULTS.checkIntervalMs,
  });
  server.keepAliveTimeout = options.keepAliveTimeoutMs ?? SERVER_DEFAULTS.keepAliveTimeoutMs;
  server.maxConnections = options.maxConnections ?? SERVER_DEFAULTS.maxConnections;
  // Not a Set: one that takes and drops a response a request keeps every response alive past its
  // end once a mark-compact has promoted its table (in-flight.ts).
  const active = new InFlight<ServerResponse>();
  let draining = false;

  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    (req as Arrived)[ARRIVED] = performance.now();
    // Arrived on a kept-alive connection while draining: serve it, then close that connection.
    if (draining) res.setHeader("Connection", "close");
    res.setMaxListeners(RESPONSE_MAX_LISTENERS);
    const slot = active.add(res);
    res.once("close", () => active.remove(slot, res));
    closeWithConnection(req, res);
  });
  const early = EARLY.get(app);
  // serve()'s classes give every request and response express's prototypes (expressClasses): they are express's own.
  server.on("request", early === undefined ? app : (req: Request, res: Response) => early(req, res, () => void app(req, res)));
  // Without a listener Node answers "100 Continue" by itself before the app has looked at the headers;
  // with it, the routes send it when they want the body (http/request-body.ts).
  server.on("checkContinue", (req: IncomingMessage, res: ServerResponse) => server.emit("request", req, res));
  // What Node cannot parse is answered as Node answers it, and counted and logged (client-errors.ts).
  server.on("clientError", clientErrorListener(app));

  // From the start: each listening socket forwards its accept errors once it listens, maybe before the last does.
  server.on("error", acceptErrorListener(app));
  const listening = await listenOn(server, {
    host: options.host ?? "127.0.0.1",
    port: options.port ?? 0,
    backlog: options.listenBacklog ?? SERVER_DEFAULTS.listenBacklog,
    acceptors: options.acceptors ?? SERVER_DEFAULTS.acceptors,
    maxConnections: server.maxConnections,
  });
  const address = server.address() as AddressInfo;

  const drain = (timeoutMs: number): Promise<boolean> => {
    draining = true;
    DRAIN_HOOKS.get(app)?.();
    return drainServer(server, listening, active, timeoutMs);
  };

  return {
    server,
    host: address.address,
    port: address.port,
    inFlight: () => active.size,
    drain,
    [Symbol.asyncDispose]: async () => {
      await drain(options.disposeDrainTimeoutMs ?? DEFAULT_DISPOSE_DRAIN_MS);
    },
  };
}

/**
 * serve()'s drain: stops every listening socket accepting, lets the responses in flight finish, and
 * closes each connection as it falls idle; at `timeoutMs` cuts what is left. Resolves whether
 * everything finished.
 */
function drainServer(server: Server, listening: Listening, active: Iterable<ServerResponse>, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const closed = listening.close();
    // Every listening socket stops accepting; a response not yet started learns to close its
    // connection, so that no client keeps sending requests into a stopping server.
    for (const res of active) if (!res.headersSent) res.setHeader("Connection", "close");
    // Idle connections are closed after the loop's next poll (its second check phase from now): a
    // connection read again as the drain began (onDrain: admission's parked ones) delivers the request
    // waiting on it there, and is then no longer idle. Then every 50 ms: one mid-request becomes idle
    // after its response.
    let sweeper: NodeJS.Timeout | undefined;
    let ended = false;
    setImmediate(() =>
      setImmediate(() => {
        if (ended) return;
        server.closeIdleConnections();
        sweeper = setInterval(() => server.closeIdleConnections(), 50);
      }),
    );
    const end = (drained: boolean): void => {
      ended = true;
      clearInterval(sweeper);
      clearTimeout(deadline);
      resolve(drained);
    };
    const deadline = setTimeout(() => {
      for (const res of active) cutByDrain.add(res);
      server.closeAllConnections();
      end(false);
    }, timeoutMs);
    void closed.then(() => end(true));
  });
}
