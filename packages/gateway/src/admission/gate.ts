import { performance } from "node:perf_hooks";
import type { Request, RequestHandler, Response } from "express";
import type { Logger } from "pino";
import { z } from "zod";
import type { ApiKeys } from "../auth/api-keys.js";
import { ClientGoneError } from "../http/client-gone.js";
import type { EarlyHandler } from "../http/server.js";
import { REQUEST_ID_HEADER, requestIdOf } from "../http/request-scope.js";
import { make, sendProblem, type Classified } from "../problems/problem.js";
import { Admission, OverloadedError, REFUSALS, type Priority, type Release, type ShedReason } from "./admission.js";
import { FairShare } from "./fair-share.js";
import { LoopDelay } from "./loop-delay.js";
import type { AdmissionMetrics } from "./metrics.js";

/** GatewayOptions.admission, with its defaults (measured with `pnpm bench overload`: docs/benchmarks.md). */
export const admissionSchema = z.strictObject({
  enabled: z.boolean().default(true).describe("refuse early under overload (default true)"),
  minConcurrency: z.number().int().min(1).max(100_000).default(8).describe("each route family's limit at least (default 8)"),
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
      "the event loop's delay admission keeps under: above it, each API key gets a fair share of what is let in, lease acquisitions half of it (default 25)",
    ),
});
export type AdmissionOptions = z.input<typeof admissionSchema>;
type AdmissionConfig = z.output<typeof admissionSchema>;

/** The route families, each with a gate of its own: the backends behind them differ. */
const FAMILIES = ["records", "objects", "leases", "fences"] as const;
type Family = (typeof FAMILIES)[number];

/** A refused request's answer names its reason; a warning sums them up at most this often. */
const WARN_EVERY_MS = 10_000;

/**
 * Admission control, before any route: which family and priority a request has, which API key sent
 * it, and whether it may go on now, after a wait, or not at all (503 `overloaded`, Retry-After).
 * Lease extensions and releases always go on — refusing them turns overload into lost leases and
 * more lock churn — and so do requests that authenticate with no key (the route answers 401).
 */
export function admissionGate(options: {
  readonly config: AdmissionOptions;
  readonly auth: ApiKeys;
  readonly metrics: AdmissionMetrics;
  readonly logger: Logger;
  /** Counts an answered request as the request metrics do (route, method, status, seconds): for the refusals answered early. */
  readonly answered: (route: string, method: string, status: number, seconds: number) => void;
}): { readonly handler: RequestHandler; readonly early: EarlyHandler | undefined; stop(): void } {
  const config: AdmissionConfig = admissionSchema.parse(options.config);
  if (!config.enabled) return { handler: (_req, _res, next) => next(), early: undefined, stop: () => undefined };
  const loop = new LoopDelay();
  const fair = new FairShare();
  const gates = familyGates(config, loop);
  options.metrics.watch(gates, loop);
  const warn = summary(options.logger);

  /** The refusal, answered here: no error is made, thrown or classified for it (under overload it is the common answer). */
  const refuse = (req: Request, res: Response, family: Family, priority: Priority, reason: ShedReason): void => {
    options.metrics.shed(family, priority, reason);
    warn(reason);
    // A client waiting for "100 Continue" will not send its body: this connection cannot carry another request (as app.ts's fail()).
    if (/^100-continue$/i.test(req.headers.expect ?? "")) res.setHeader("Connection", "close");
    sendProblem(res, make("overloaded", REFUSALS[reason], { reason }));
  };

  /** The loop is behind: the gateway's own CPU is short. Each key gets its share; acquisitions half of it. */
  const withinShare = (key: string, priority: Priority): boolean => {
    const now = performance.now();
    fair.adjust(now, loop.ms, config.maxEventLoopDelayMs);
    return fair.admit(key, priority === "acquire" ? 0.5 : 1, now, Math.random());
  };

  /**
   * The share's refusal before express sees the request (serve() calls it first): under overload the
   * gateway's CPU is what is short, and a refusal through every middleware cost about 5 times what
   * node:http alone takes to answer. It answers as the middleware's refusal does — 503 overloaded,
   * Retry-After, the request id in header and body, counted — and marks a request let in, so that
   * the share is judged once.
   */
  const early: EarlyHandler = (req, res) => {
    const started = performance.now();
    const seen = requestOf(options.auth, req);
    if (seen === undefined) return false;
    (req as Judged)[SHARE_JUDGED] = true;
    if (withinShare(seen.key, seen.priority)) return false;
    options.metrics.shed(seen.family, seen.priority, "event-loop-delay");
    warn("event-loop-delay");
    const requestId = answerEarly(req, res, make("overloaded", REFUSALS["event-loop-delay"], { reason: "event-loop-delay" }));
    const ms = performance.now() - started;
    options.answered(seen.family, req.method, 503, ms / 1000);
    // As the request's line of every other refusal: at debug (a line each would cost a write each under overload).
    if (options.logger.isLevelEnabled("debug"))
      options.logger.debug({ requestId, method: req.method, route: seen.family, status: 503, ms, problem: "overloaded" }, "request");
    return true;
  };

  const handler: RequestHandler = (req, res, next) => {
    const seen = requestOf(options.auth, req);
    if (seen === undefined) return next();
    const { family, priority, key } = seen;
    // Judged already when serve() asked `early` first; an app mounted on a server of its own is judged here.
    if ((req as Judged)[SHARE_JUDGED] !== true && !withinShare(key, priority))
      return refuse(req, res, family, priority, "event-loop-delay");
    const admitted = (gates.get(family) as Admission).admit(priority, key, (cancel) => watchClient(res, cancel));
    if (typeof admitted === "function") return hold(res, admitted, next);
    if (typeof admitted === "string") return refuse(req, res, family, priority, admitted);
    admitted.then(
      (release) => hold(res, release, next),
      (err: unknown) => (err instanceof OverloadedError ? refuse(req, res, family, priority, err.reason) : next(err)),
    );
  };
  return { handler, early, stop: () => loop.stop() };
}

/**
 * Each route family's gate. Its limit starts at the top: one that starts low throttles a gateway
 * whose calls take long because its own loop is busy, which it does not learn from (`measuring`).
 */
function familyGates(config: AdmissionConfig, loop: LoopDelay): Map<Family, Admission> {
  const limit = { initial: config.maxConcurrency, min: config.minConcurrency, max: config.maxConcurrency };
  return new Map(
    FAMILIES.map((f) => [
      f,
      new Admission({
        limit,
        adaptive: f !== "objects",
        queueLength: config.queueLength,
        queueTimeoutMs: config.queueTimeoutMs,
        // While the loop is late, calls take longer for a reason of the gateway's own: the backends' limits learn nothing from them.
        measuring: () => loop.ms <= config.maxEventLoopDelayMs,
      }),
    ]),
  );
}

/** The request's route family, priority and API key; undefined when admission does not judge it (no family, an extension or release, no valid key). */
function requestOf(auth: ApiKeys, req: Request): { family: Family; priority: Priority; key: string } | undefined {
  const family = familyOf(req.path);
  const priority = family === undefined ? undefined : priorityOf(family, req);
  const key = priority === undefined ? undefined : principalOf(auth, req);
  return family === undefined || priority === undefined || key === undefined ? undefined : { family, priority, key };
}

/** A request the early handler judged against the share (and let in). */
const SHARE_JUDGED = Symbol("fenced.admission.shareJudged");
type Judged = Request & { [SHARE_JUDGED]?: boolean };

/** Answers a refusal on the bare response: the request id, the problem with it, Retry-After; no express. */
function answerEarly(req: Request, res: Response, problem: Classified): string {
  const requestId = requestIdOf(req.headers);
  const text = JSON.stringify({ ...problem.body, requestId });
  res.writeHead(problem.body.status, {
    ...problem.headers,
    "Content-Type": "application/problem+json; charset=utf-8",
    "Content-Length": Buffer.byteLength(text),
    [REQUEST_ID_HEADER]: requestId,
    // A client waiting for "100 Continue" will not send its body: this connection cannot carry another request.
    ...(/^100-continue$/i.test(req.headers.expect ?? "") ? { Connection: "close" } : {}),
  });
  res.end(text);
  return requestId;
}

/** The slot is the request's until its response is over (or its client gone). */
function hold(res: Response, release: Release, next: (err?: unknown) => void): void {
  // The client left as the request was let in: nobody is left to answer, so the route does not run
  // (no lock or store work for it), and the slot goes at once to the next one.
  if (res.closed) return release();
  res.once("close", release);
  next();
}

/** While the request waits: its client going away takes it out of the queue. */
function watchClient(res: Response, cancel: (reason: Error) => void): void {
  res.once("close", () => {
    if (!res.writableFinished) cancel(new ClientGoneError("answer"));
  });
}

function familyOf(path: string): Family | undefined {
  for (const family of FAMILIES) if (path.startsWith(`/v1/${family}`)) return family;
  return undefined;
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
