import type { Request, Response } from "express";
import { FencedError } from "@fenced/fence";
import { ClientGoneError } from "./http/client-gone.js";
import { expectsContinue } from "./http/request-body.js";
import { endRequestSpan, inRequestScope } from "./http/request-scope.js";
import { wasCutByDrain } from "./http/server.js";
import { PROBLEM_TYPES, type ProblemKind } from "./problems/kinds.js";
import { classify, sendProblem } from "./problems/problem.js";
import { accounting, type RouteContext } from "./routes/context.js";

/**
 * A request's end, for app.ts: `fail`, the answer to an error no route answered (its problem, or a
 * cut connection once the answer has begun); `account`, once the response is over, its one metric,
 * its span's end and its one log line, at the level its outcome calls for.
 */

/** Answers `err` as its problem; its line is logged once, with the request's (account). */
export function fail(_ctx: RouteContext, err: unknown, req: Request, res: Response): void {
  const problem = classify(err);
  // Logged once, with the request's line, when the response is over (account).
  accounting(res).failure = { err, kind: problem.kind, detail: problem.body.detail };
  if (res.headersSent) {
    // Mid-stream (a GET whose source failed): a cut connection is the only honest signal left.
    res.destroy();
    return;
  }
  // The client still waits for "100 Continue" and will not send the body: this connection cannot carry another request.
  if (expectsContinue(req) && res.locals.continued !== true) res.setHeader("Connection", "close");
  sendProblem(res, problem);
}

/** Counts, ends and logs a request whose response is over: `route` its family, `ms` its time from arrival. */
export function account(ctx: RouteContext, req: Request, res: Response, route: string, ms: number): void {
  const a = accounting(res);
  // A response cut short: by the drain at its deadline (503: the gateway stopped serving it), or
  // because the client went away or a server timeout closed the connection (499, as nginx logs it).
  const cut = res.writableFinished ? undefined : wasCutByDrain(res) ? "drain" : "connection";
  const status = cut === undefined ? res.statusCode : cut === "drain" ? 503 : 499;
  ctx.metrics.request(route, req.method, status, ms / 1000);
  if (a.write !== undefined) {
    if (a.accepted === true) ctx.metrics.writeAccepted(a.write.store, a.write.op);
    else
      ctx.metrics.writeRejected(
        a.write.store,
        a.write.op,
        a.problem === undefined
          ? cut === "drain"
            ? "drained"
            : cut === "connection"
              ? "aborted"
              : "error"
          : PROBLEM_TYPES[a.problem].reason,
      );
  }
  const slug = a.problem === undefined ? undefined : PROBLEM_TYPES[a.problem].log;
  endRequestSpan(a, status, slug ?? (cut === undefined ? "ok" : cut === "drain" ? "drained" : "aborted"));
  const failure = a.failure;
  const unexpected = failure !== undefined && !(failure.err instanceof ClientGoneError) && UNEXPECTED.has(failure.kind);
  // One line per request. A refusal the gateway expects (a stale token, a version, a held lock, a
  // backend down) is a warning without a stack; only a failure of the gateway or of a backend's
  // answer is an error, with the stack. Checked first: a successful request costs no log object.
  const level = unexpected
    ? "error"
    : a.problem !== undefined && QUIET.has(a.problem)
      ? "debug"
      : status >= 500 || status === 409 || status === 412
        ? "warn"
        : status >= 400
          ? "info"
          : "debug";
  if (!ctx.logs(level)) return;
  // In the request's scope: its line is logged by the request's own logger, with its requestId.
  inRequestScope(a, () =>
    ctx.logger[level](
      {
        method: req.method,
        route,
        status,
        ms: Math.round(ms * 10) / 10,
        apiKey: a.principal,
        // The kind's slug, as its problem `type` and its metric `reason` spell it (kinds.ts, outcomeNames).
        problem: slug,
        ...(failure === undefined || level === "info"
          ? {}
          : unexpected
            ? { err: failure.err }
            : { code: failure.err instanceof FencedError ? failure.err.code : undefined, detail: failure.detail }),
        cut,
      },
      cut === "drain" ? "request cut by the drain" : unexpected ? "request failed" : "request",
    ),
  );
}

/** The problems that are failures of the gateway, or of a backend's answer (an operator must look): logged as errors, with the stack. */
const UNEXPECTED: ReadonlySet<ProblemKind> = new Set(["internal", "backendError"]);
/** Refusals counted in /metrics and summed up in a warning every few seconds (admission/gate.ts): a line each would cost a write each under overload. */
const QUIET: ReadonlySet<ProblemKind> = new Set(["overloaded"]);
