import { performance } from "node:perf_hooks";
import type { Request, RequestHandler, Response } from "express";
import type { Logger } from "pino";
import { z } from "zod";
import type { ApiKeys } from "../auth/api-keys.js";
import { ClientGoneError } from "../http/client-gone.js";
import { expectsContinue } from "../http/request-body.js";
import { arrivalOf, type EarlyHandler } from "../http/server.js";
import { familyOf, ROUTE_FAMILIES, type RouteFamily as Family } from "../http/route.js";
import { PROBLEM_TYPES } from "../problems/kinds.js";
import { make, sendProblem } from "../problems/problem.js";
import type { ShedReason } from "../vocabulary/shed-reasons.js";
import { Admission, OverloadedError, REFUSALS, type Priority, type Release } from "./admission.js";
import { Backlog, loopState } from "./backlog.js";
import { answerRefusal } from "./early-answer.js";
import { FairShare } from "./fair-share.js";
import type { LimitSettings } from "./limit.js";
import { LoopDelay } from "./loop-delay.js";
import type { AdmissionMetrics } from "./metrics.js";
import { Parking } from "./parking.js";

/** GatewayOptions.admission, with its defaults (measured with `pnpm bench overload`: docs/benchmarks.md). */
export const admissionSchema = z.strictObject({
  enabled: z.boolean().default(true).describe("refuse early under overload (default true)"),
  minConcurrency: z
    .number()
    .int()
    .min(1)
    .max(100_000)
    .default(8)
    .describe(
      "each route family's limit at least, and /v1/records' at least its PostgreSQL pool's size; maxConcurrency caps both (default 8)",
    ),
  maxConcurrency: z
    .number()
    .int()
    .min(1)
    .max(100_000)
    .default(512)
    .describe("each route family's limit at most, and the fixed limit of /v1/objects (default 512)"),
  queueLength: z
    .number()
    .int()
    .min(0)
    .max(1_000_000)
    .default(256)
    .describe("requests that may wait for a slot, per route family (default 256)"),
  queueTimeoutMs: z.number().int().min(1).max(600_000).default(250).describe("the longest a request waits for a slot (default 250)"),
  maxEventLoopDelayMs: z
    .number()
    .int()
    .min(1)
    .max(600_000)
    .default(25)
    .describe(
      "the event loop's delay admission keeps under: above it, while the loop works at least 0.8 of its time (its utilization), each API key gets a fair share of what is let in, lease acquisitions half of it (default 25)",
    ),
});
export type AdmissionOptions = z.input<typeof admissionSchema>;
type AdmissionConfig = z.output<typeof admissionSchema>;

/**
 * The longest a refused request's connection is parked (parking.ts) before it is read again, room or
 * not: the Retry-After its refusal carries, which its client is asked to wait anyway. It bounds how
 * long a request sent on it — a lease's extension too — waits unread. A shorter bound lets a flood
 * over many connections be read as fast as it sends (2,048 connections parked 250 ms each: 8,192
 * reads a second, measured with `pnpm bench overload`).
 */
const MAX_PARK_MS = (PROBLEM_TYPES.overloaded.retryAfter ?? 1) * 1000;

/** A refused request's answer names its reason; a warning sums them up at most this often. */
const WARN_EVERY_MS = 10_000;

/**
 * Admission control, before any route: which family and priority a request has, which API key sent
 * it, and whether it may go on now, after a wait, or not at all (503 `overloaded`, Retry-After).
 * Lease extensions and releases always go on — refusing them turns overload into lost leases and
 * more lock churn — and so do requests that authenticate with no key (the route answers 401).
 */
export function admissionGate(options: GateOptions): {
  readonly handler: RequestHandler;
  readonly early: EarlyHandler | undefined;
  /** A drain begins: every parked connection is read again, and none parked from now on (their requests are answered, not cut as idle). */
  beginDrain(): void;
  stop(): void;
} {
  const config: AdmissionConfig = admissionSchema.parse(options.config);
  if (!config.enabled)
    return { handler: (_req, _res, next) => next(), early: undefined, beginDrain: () => undefined, stop: () => undefined };
  const loop = new LoopDelay();
  const gates = familyGates(config, loop, options.recordsPoolSize);
  const fair = new FairShare();
  const parking = new Parking<Family>({
    room: (family, key) => roomFor(gates.get(family) as Admission, config.queueLength, key),
    // The share is adjusted only as requests are read: with nothing in flight it says nothing of now.
    keepingUp: () => fair.share === Infinity || [...gates.values()].every((gate) => gate.inflight === 0),
    maxParkMs: MAX_PARK_MS,
  });
  options.metrics.watch(gates, loop, fair, parking);
  const decide = decision(config, { gates, loop, fair, parking }, options);
  return {
    handler: middleware(options.auth, decide),
    early: earlyHandler(options, decide),
    beginDrain: () => parking.stop(),
    stop: () => {
      loop.stop();
      parking.stop();
    },
  };
}

interface GateOptions {
  readonly config: AdmissionOptions;
  readonly auth: ApiKeys;
  readonly metrics: AdmissionMetrics;
  readonly logger: Logger;
  /** The records store's connections at most (its pool's `max`, StoreDefinition.pool): the records family's limit never falls below it. */
  readonly recordsPoolSize?: number | undefined;
  /** Counts an answered request as the request metrics do (route, method, status, seconds): for the refusals answered early. */
  readonly answered: (route: string, method: string, status: number, seconds: number) => void;
}

/**
 * The decision on a request: `next` once it may go on (now, or after its wait in the queue), holding
 * its slot until its response is over; `refuse` with the reason if it may not (counted here, answered
 * by the caller); `fail` if its wait ended otherwise (its client gone).
 */
type Decide = (seen: Seen, res: Response, refuse: (reason: ShedReason) => void, next: () => void, fail: (err: unknown) => void) => void;

function decision(
  config: AdmissionConfig,
  { gates, loop, fair, parking }: { gates: Map<Family, Admission>; loop: LoopDelay; fair: FairShare; parking: Parking<Family> },
  options: GateOptions,
): Decide {
  const warn = summary(options.logger);
  const backlog = new Backlog();
  /** While the loop is behind on its own work, each key gets its share; acquisitions half of it. */
  const withinShare = (key: string, priority: Priority): boolean => {
    const now = performance.now();
    let admitted = 0;
    let queued = 0;
    for (const gate of gates.values()) {
      admitted += gate.inflight + gate.queued;
      queued += gate.queued;
    }
    backlog.observe(now, admitted, queued);
    fair.adjust(now, loopState(loop, backlog, config.maxEventLoopDelayMs, OWN_WORK_UTILIZATION));
    return fair.admit(key, priority === "acquire" ? 0.5 : 1, now, Math.random());
  };
  return (seen, res, answer, next, fail) => {
    // The connection's next request is read when there is room for it (parking.ts); its answer is out.
    const socket = res.socket;
    const refuse = (reason: ShedReason): void => {
      options.metrics.shed(seen.family, seen.priority, reason);
      warn(reason);
      answer(reason);
      // Once the answer is out and the server has set the connection's keep-alive timer (parking.ts suspends it).
      res.once("close", () => parking.answered(socket, seen.key, seen.family, false));
    };
    const held = (release: Release): void =>
      hold(
        res,
        () => {
          release();
          parking.answered(socket, seen.key, seen.family, true);
        },
        next,
        fail,
      );
    if (!withinShare(seen.key, seen.priority)) return refuse("event-loop-delay");
    const admitted = (gates.get(seen.family) as Admission).admit(seen.priority, seen.key, (cancel) => watchClient(res, cancel));
    if (typeof admitted === "function") return held(admitted);
    if (typeof admitted === "string") return refuse(admitted);
    admitted.then(held, (err: unknown) => (err instanceof OverloadedError ? refuse(err.reason) : fail(err)));
  };
}

/**
 * How many parked connections of `key` the family can read now (parking.ts): each free slot; and,
 * with none free, one place in the queue while the key has nothing waiting there. A key's own
 * standing queue is not lengthened by its parked connections — read into it, a request waits behind
 * the others (each up to queueTimeoutMs, some refused for that) where it could wait unread at no
 * cost; measured, a closed loop of 1,024 over one key kept 230 writes queued for good, and a
 * burst of them refused whenever a stall pushed the wait past the timeout (docs/benchmarks.md).
 * A key with nothing queued gets its place, so that another key keeping the queue full without
 * being refused (a closed loop larger than the limit, smaller than the queue) takes turns with it
 * rather than have every slot (the queue's turns go across keys) while it waits out Retry-After.
 */
export function roomFor(gate: Pick<Admission, "limit" | "inflight" | "queued" | "queuedOf">, queueLength: number, key: string): number {
  const free = gate.limit - gate.inflight - gate.queued;
  if (free > 0) return free;
  return gate.queued < queueLength && gate.queuedOf(key) === 0 ? 1 : 0;
}

/**
 * The loop works at least this share of its time when it is behind on work of its own. Late while it
 * works less (it waits for I/O the rest), it is short of a CPU another process has (a busy host):
 * refusing requests would not give it back, and a gateway that barely works would refuse a client
 * sending one request at a time.
 */
const OWN_WORK_UTILIZATION = 0.8;

/**
 * Every request, before express (serve() calls it first): under overload the gateway's CPU is what is
 * short, and a refusal through every middleware costs about 5 times what node:http alone takes to
 * answer. A refusal is answered here as the middleware's would be (early-answer.ts) — 503
 * overloaded, Retry-After, the request id in header and body, counted, its time from arrival — and
 * the request is marked as judged, so that the middleware lets it through (or passes on the error its
 * wait ended with).
 */
function earlyHandler(options: GateOptions, decide: Decide): EarlyHandler {
  return (req, res, next) => {
    const seen = judgeable(options.auth, req);
    const judged = req as Judged;
    judged[JUDGED] = true;
    if (seen === undefined) return next();
    const refuse = (reason: ShedReason): void => {
      const requestId = answerRefusal(req, res, reason);
      const ms = performance.now() - (arrivalOf(req) ?? performance.now());
      options.answered(seen.family, req.method, 503, ms / 1000);
      // As the request's line of every other refusal: at debug (a line each would cost a write each under overload).
      if (options.logger.isLevelEnabled("debug"))
        options.logger.debug({ requestId, method: req.method, route: seen.family, status: 503, ms, problem: "overloaded" }, "request");
    };
    decide(seen, res, refuse, next, (err) => {
      judged[JUDGED] = err;
      next();
    });
  };
}

/** Judges a request serve()'s early handler has not (an app on a server of its own), answering with the app's own problem and accounting. */
function middleware(auth: ApiKeys, decide: Decide): RequestHandler {
  return (req, res, next) => {
    const judged = (req as Judged)[JUDGED];
    if (judged !== undefined) return judged === true ? next() : next(judged);
    const seen = requestOf(auth, req);
    if (seen === undefined) return next();
    const refuse = (reason: ShedReason): void => {
      // A client waiting for "100 Continue" will not send its body: this connection cannot carry another request (as outcomes.ts' fail()).
      if (expectsContinue(req)) res.setHeader("Connection", "close");
      sendProblem(res, make("overloaded", REFUSALS[reason], { reason }));
    };
    decide(seen, res, refuse, () => next(), next);
  };
}

/**
 * Each route family's gate. Its limit starts at the top: one that starts low throttles a gateway
 * whose calls take long because its own loop is busy, which it does not learn from (`measuring`).
 */
function familyGates(config: AdmissionConfig, loop: LoopDelay, recordsPoolSize: number | undefined): Map<Family, Admission> {
  return new Map(
    ROUTE_FAMILIES.map((f) => [
      f,
      new Admission({
        limit: familyLimit(config, f === "records" ? recordsPoolSize : undefined),
        adaptive: f !== "objects",
        queueLength: config.queueLength,
        queueTimeoutMs: config.queueTimeoutMs,
        // While the loop is late — its own work, or its thread waiting for a CPU — calls take
        // longer for a reason of the gateway's own: the backends' limits learn nothing from them.
        // (Measured: learning under a quota of half a core took the records limit from 512 to 21
        // while the pool kept up, and it refused 2,580 writes a second at 2× with goodput 0.38.)
        measuring: () => loop.rawMs <= config.maxEventLoopDelayMs,
      }),
    ]),
  );
}

/**
 * A family's limit: from maxConcurrency down to minConcurrency, and never below its backend's pool
 * (`poolSize`, for records) — unless maxConcurrency is less than either: it caps them. Below the
 * pool, connections sit idle while requests are refused: under overload a put's time grows with the
 * gateway's own loop (each round trip to PostgreSQL answered on a turn of a loop busy reading and
 * refusing), which the gradient cannot tell from a slower backend — it took the limit to 13 of 16
 * connections while refusing 13,000 writes a second (docs/benchmarks.md).
 */
export function familyLimit(config: Pick<AdmissionConfig, "minConcurrency" | "maxConcurrency">, poolSize?: number): LimitSettings {
  const min = Math.min(config.maxConcurrency, Math.max(config.minConcurrency, poolSize ?? 0));
  return { initial: config.maxConcurrency, min, max: config.maxConcurrency };
}

/** A request admission judges: its route family, priority and API key. */
interface Seen {
  readonly family: Family;
  readonly priority: Priority;
  readonly key: string;
}

/** The request's route family, priority and API key; undefined when admission does not judge it (no family, an extension or release, no valid key). */
function requestOf(auth: ApiKeys, req: Request): Seen | undefined {
  const family = familyOf(req);
  const priority = family === undefined ? undefined : priorityOf(family, req);
  const key = priority === undefined ? undefined : principalOf(auth, req);
  return family === undefined || priority === undefined || key === undefined ? undefined : { family, priority, key };
}

/**
 * requestOf, for a request express has not seen: a path the URL parser throws on (`GET http://[::1/…`,
 * which node:http lets through) is not judged here but left to express, which answers it 400 — a
 * throw here would be outside any handler, and end the process.
 */
function judgeable(auth: ApiKeys, req: Request): Seen | undefined {
  try {
    return requestOf(auth, req);
  } catch {
    return undefined;
  }
}

/** A request the early handler judged: true, let in (or not judged: no key, or never refused); else the error its wait ended with. */
const JUDGED = Symbol("fenced.admission.judged");
type Judged = Request & { [JUDGED]?: unknown };

/** The slot is the request's until its response is over (or its client gone). */
function hold(res: Response, release: Release, next: () => void, fail: (err: unknown) => void): void {
  // The client left as the request was let in: nobody is left to answer, so the route does not run
  // (no lock or store work for it), the slot goes at once to the next one, and the request is
  // counted and logged as any whose client left (499).
  if (res.closed) {
    release();
    return fail(new ClientGoneError("answer"));
  }
  res.once("close", release);
  next();
}

/** While the request waits: its client going away takes it out of the queue. */
function watchClient(res: Response, cancel: (reason: Error) => void): void {
  res.once("close", () => {
    if (!res.writableFinished) cancel(new ClientGoneError("answer"));
  });
}

/** undefined: never refused (a lease's extension or release). */
function priorityOf(family: Family, req: Request): Priority | undefined {
  if (family !== "leases") return "work";
  if (req.path === "/v1/leases/extend" || req.path === "/v1/leases/release") return undefined;
  return "acquire";
}

/** The id of the request's API key; undefined when it has none that is valid (the route answers 401, as without admission). */
function principalOf(auth: ApiKeys, req: Request): string | undefined {
  try {
    return auth.authenticate(req).id;
  } catch {
    return undefined;
  }
}

/** One warning per WARN_EVERY_MS at most while requests are refused, with how many and why since the last. */
function summary(logger: Logger): (reason: ShedReason) => void {
  let since = 0;
  let counts: Partial<Record<ShedReason, number>> = {};
  return (reason) => {
    counts[reason] = (counts[reason] ?? 0) + 1;
    const now = Date.now();
    if (now - since < WARN_EVERY_MS) return;
    logger.warn({ shed: counts }, "overloaded: refusing requests (503 overloaded) to keep the rest within their deadlines");
    since = now;
    counts = {};
  };
}
