/**
 * The HTTP mapping of problems: HttpProblem (an error that knows its answer), classify() (any error
 * to a problem kind and body) and sendProblem(). The kinds themselves are the table in kinds.ts.
 */
import type { Response } from "express";
import { ZodError } from "zod";
import { FencedError } from "@fenced/fence";
import { BackendFailedError } from "./backend-errors.js";
import { fencedAnswer } from "./fenced-errors.js";
import { PROBLEM_TYPES, type ProblemDefinition, type ProblemExtensions, type ProblemKind } from "./kinds.js";

/**
 * RFC 9457 problem details. `type` is a relative URI reference naming the kind of problem; clients
 * branch on it (two 409s differ: a stale token is final, a held lock is worth retrying).
 */
interface ProblemBody {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail?: string;
  readonly [extension: string]: unknown;
}

/**
 * The extensions and headers of a problem: typed by its kind from the table (kinds.ts), whose schemas
 * the API document is made of, and required when the kind has required extensions.
 */
type ProblemArgs<K extends ProblemKind> =
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- {}: "no members are required"
  {} extends ProblemExtensions<K>
    ? [extensions?: ProblemExtensions<K>, headers?: Readonly<Record<string, string>>]
    : [extensions: ProblemExtensions<K>, headers?: Readonly<Record<string, string>>];

/** An error that already knows its HTTP answer. Thrown by validation, auth and the routes. */
export class HttpProblem<K extends ProblemKind = ProblemKind> extends Error {
  readonly extensions: Readonly<Record<string, unknown>>;
  readonly headers: Readonly<Record<string, string>>;

  constructor(
    readonly kind: K,
    detail: string,
    ...[extensions, headers]: ProblemArgs<K>
  ) {
    super(detail);
    this.name = "HttpProblem";
    this.extensions = extensions ?? {};
    this.headers = headers ?? {};
  }
}

// instanceof alone narrows a generic class to HttpProblem<any>.
const isHttpProblem = (err: unknown): err is HttpProblem => err instanceof HttpProblem;

export interface Classified {
  readonly kind: ProblemKind;
  readonly body: ProblemBody;
  readonly headers: Readonly<Record<string, string>>;
}

/** A problem of `kind`, answered as is (sendProblem), without an error to classify: for answers on a hot path, such as admission control's refusals. */
export function make<K extends ProblemKind>(kind: K, detail: string | undefined, ...[extensions, headers]: ProblemArgs<K>): Classified {
  return classified(kind, detail, extensions ?? {}, headers ?? {});
}

function classified(
  kind: ProblemKind,
  detail: string | undefined,
  extensions: Readonly<Record<string, unknown>>,
  headers: Readonly<Record<string, string>>,
): Classified {
  const t: ProblemDefinition = PROBLEM_TYPES[kind];
  return {
    kind,
    body: { ...extensions, type: t.type, title: t.title, status: t.status, ...(detail === undefined ? {} : { detail }) },
    // The table says which kinds carry Retry-After, and how long: every answer of such a kind has it.
    headers: t.retryAfter === undefined ? headers : { ...headers, "Retry-After": String(t.retryAfter) },
  };
}

/**
 * The one place that turns an error into a status. A client mistake is always a 4xx; only what
 * the gateway or a backend did wrong is a 5xx, and its detail never leaves the process.
 */
export function classify(err: unknown): Classified {
  if (isHttpProblem(err)) return classified(err.kind, err.message, err.extensions, err.headers);
  // Every error of the packages (the lock's, the stores', @fenced/fence's): its code names its kind.
  // Among them InvalidArgumentError, the only TypeError that is a 400: any other TypeError or
  // RangeError is a bug of ours, a 500.
  if (err instanceof FencedError) {
    const { kind, detail, extensions } = fencedAnswer(err);
    return classified(kind, detail, extensions, {});
  }
  if (err instanceof ZodError) {
    const errors = err.issues.map((i) => ({ path: i.path.map(String).join("."), message: i.message }));
    return make("invalid", errors.map((e) => (e.path === "" ? e.message : `${e.path}: ${e.message}`)).join("; "), { errors });
  }
  const e = err as { status?: unknown; expose?: unknown; type?: unknown; message?: unknown; code?: unknown; limit?: unknown } | null;
  // http-errors (express's own, and a middleware's an embedding adds): their status says which problem.
  if (e !== null && typeof e === "object" && typeof e.status === "number" && e.status >= 400 && e.status < 500 && e.expose === true) {
    const detail = typeof e.message === "string" ? e.message : undefined;
    // An entity.too.large carries the limit: the answer names it, as the gateway's own body readers do.
    if (e.status === 413) return make("tooLarge", typeof e.limit === "number" ? `body: more than ${e.limit} bytes` : detail);
    if (e.status === 415) return make("mediaType", detail);
    return make("invalid", detail);
  }
  // A path segment that is not valid percent-encoding (express decodes route parameters).
  if (err instanceof URIError) return make("invalid", err.message);
  // What a store passes on unchanged: the backend's own error answer, or its client's failure (backend-errors.ts).
  if (err instanceof BackendFailedError)
    return make("backendError", `the ${err.backend} ${err.operation} failed with an error no store classifies; see the gateway's log`, {
      backend: err.backend,
    });
  return make("internal", "the request failed inside the gateway; see its log");
}

/** Sends the problem, its body with the request's id (set on res.locals by http/request-scope.ts, as its X-Request-Id header). */
export function sendProblem(res: Response, problem: Classified): void {
  res.locals.problem = problem.kind;
  res.status(problem.body.status);
  for (const [name, value] of Object.entries(problem.headers)) res.setHeader(name, value);
  res.setHeader("Content-Type", "application/problem+json; charset=utf-8");
  const requestId: unknown = res.locals.requestId;
  const text = JSON.stringify(typeof requestId === "string" ? { ...problem.body, requestId } : problem.body);
  // Ended directly, not through res.send (no freshness or ETag to judge for a problem): under overload most answers are refusals.
  res.setHeader("Content-Length", Buffer.byteLength(text));
  res.end(text);
}
