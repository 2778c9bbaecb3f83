// The request scope's own cost, in this process, where a fraction of a µs is resolved (the layers'
// removal bench, across processes under a quota, does not resolve it): the built middleware that
// gives a request its id, span and AsyncLocalStorage scope, against one that gives it only the id
// every answer carries, on the same request objects, no OpenTelemetry SDK registered.
import { median } from "./measure.js";

// The built modules, as users run them (`pnpm bench` builds first), typed by their sources.
const dist = (path: string): string => new URL(`../packages/gateway/dist/${path}`, import.meta.url).href;
const { REQUEST_ID_HEADER, requestIdOf, scopeRequest } = (await import(
  dist("http/request-scope.js")
)) as typeof import("../packages/gateway/src/http/request-scope.js");
const { routeOf } = (await import(dist("http/route.js"))) as typeof import("../packages/gateway/src/http/route.js");

type Handler = (req: never, res: never, next: () => void) => void;
const CALLS = 200_000;
const ROUNDS = 9;

function request() {
  const headers = { host: "gateway", "content-type": "application/json", authorization: "Bearer key" };
  return { req: { headers, method: "PUT", path: "/v1/records/a" }, res: { setHeader() {}, locals: {} as Record<string, unknown> } };
}

function nsPerCall(handler: Handler): number {
  let called = 0;
  const next = () => void called++;
  const started = process.hrtime.bigint();
  for (let i = 0; i < CALLS; i++) {
    const { req, res } = request();
    handler(req as never, res as never, next);
  }
  if (called !== CALLS) throw new Error(`the middleware called next ${called} times in ${CALLS}`);
  return Number(process.hrtime.bigint() - started) / CALLS;
}

/** Nanoseconds a request, median of interleaved rounds: the whole scope, and the id alone. */
export function scopeCost(): { scopeNs: number; idOnlyNs: number } {
  const scope = scopeRequest(routeOf) as unknown as Handler;
  const idOnly = ((
    req: { headers: Record<string, string> },
    res: { setHeader(n: string, v: string): void; locals: Record<string, unknown> },
    next: () => void,
  ) => {
    const id = requestIdOf(req.headers);
    res.setHeader(REQUEST_ID_HEADER, id);
    res.locals.requestId = id;
    next();
  }) as unknown as Handler;
  for (let warm = 0; warm < 3; warm++) [scope, idOnly].forEach(nsPerCall);
  const scopeNs: number[] = [];
  const idOnlyNs: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    scopeNs.push(nsPerCall(scope));
    idOnlyNs.push(nsPerCall(idOnly));
  }
  return { scopeNs: Math.round(median(scopeNs)), idOnlyNs: Math.round(median(idOnlyNs)) };
}
