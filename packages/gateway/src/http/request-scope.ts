import { AsyncLocalStorage } from "node:async_hooks";
import { randomUUID } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Span } from "@opentelemetry/api";
import type { NextFunction, Request, Response } from "express";
import type { Logger } from "pino";

/**
 * What follows one request through the gateway: its request id (the answer's X-Request-Id header,
 * every log line of the request, its problem body), and its OpenTelemetry span, the parent of every
 * lock and store span the request causes (through `@opentelemetry/api`: a no-op until the process
 * registers an SDK, as the CLI does with --otlp; ops/tracing.ts).
 */

/** The header that carries the request id, both ways. */
export const REQUEST_ID_HEADER = "X-Request-Id";

/**
 * A request id the gateway takes from a client: 1 to 128 characters of a safe alphabet (letters,
 * digits and `-_.:+/=@`), so that UUIDs, ULIDs, base64 and the ids of common proxies pass, and
 * nothing that could break a log line, a header or a query on the id does.
 */
export const SANE_REQUEST_ID = /^[A-Za-z0-9\-_.:+/=@]{1,128}$/;

/** The client's X-Request-Id when it sent one sane one, else a new UUID. */
export function requestIdOf(headers: IncomingHttpHeaders): string {
  const given = headers["x-request-id"];
  return typeof given === "string" && SANE_REQUEST_ID.test(given) ? given : randomUUID();
}

/** One request's scope: its id, and the logger bound to it, made on first use. */
interface Scope {
  readonly requestId: string;
  logger: Logger | undefined;
}

const scopes = new AsyncLocalStorage<Scope>();

/**
 * The logger of the request being served (a pino child carrying `requestId`), or `base` outside a
 * request. The child is made once per request, and only if the request logs.
 */
export function requestLogger(base: Logger): Logger {
  const scope = scopes.getStore();
  if (scope === undefined) return base;
  return (scope.logger ??= base.child({ requestId: scope.requestId }));
}

/** What the scope leaves on res.locals for the accounting once the response is over (outcomes.ts). */
export interface RequestLocals {
  requestId?: string;
  span?: Span;
  scope?: Scope;
}

/**
 * Runs `fn` in the request's scope: for what runs outside it, such as a listener of the response's
 * `close`, which Node may emit from the connection's context rather than the request's.
 */
export function inRequestScope<T>(locals: RequestLocals, fn: () => T): T {
  return locals.scope === undefined ? fn() : scopes.run(locals.scope, fn);
}

const tracer = trace.getTracer("@fenced/gateway");

/**
 * The first middleware of every app: the request id on the answer and in the scope, and the
 * request's span, a child of the client's W3C `traceparent` when the registered propagator reads
 * one. `route` names the span (the route family, never the path: a path may hold a lease id).
 */
export function scopeRequest(route: (req: Request) => string) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const requestId = requestIdOf(req.headers);
    res.setHeader(REQUEST_ID_HEADER, requestId);
    const locals = res.locals as RequestLocals;
    locals.requestId = requestId;
    const parent = propagation.extract(ROOT_CONTEXT, req.headers);
    const family = route(req);
    const span = tracer.startSpan(
      `${req.method} ${family}`,
      { kind: SpanKind.SERVER, attributes: { "http.request.method": req.method, "fenced.route": family, "fenced.request_id": requestId } },
      parent,
    );
    locals.span = span;
    const scope: Scope = { requestId, logger: undefined };
    locals.scope = scope;
    scopes.run(scope, () => context.with(trace.setSpan(parent, span), next));
  };
}

/**
 * Ends the request's span once its response is over: the status answered (499 or 503 when cut),
 * the problem's slug or `ok` as its outcome, status ERROR for a 5xx.
 */
export function endRequestSpan(locals: RequestLocals, status: number, outcome: string): void {
  const span = locals.span;
  if (span === undefined) return;
  if (span.isRecording()) {
    span.setAttributes({ "http.response.status_code": status, "fenced.outcome": outcome });
    if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end();
}
