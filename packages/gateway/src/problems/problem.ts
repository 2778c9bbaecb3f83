/**
 * The HTTP mapping of problems: HttpProblem (an error that knows its answer), classify() (any error
 * to a problem kind and body) and sendProblem(). The kinds themselves are the table in kinds.ts.
 */
import type { Response } from "express";
import { ZodError } from "zod";
import { InvalidArgumentError } from "@fenced/fence";
import {
  ContentionError,
  CorruptStateError,
  OutcomeUnknownError,
  ResourceMismatchError,
  StaleTokenError,
  StoreSetupError,
  StoreUnavailableError,
  VersionMismatchError,
} from "@fenced/store";
import { BackendFailedError } from "./backend-errors.js";
import { PROBLEM_TYPES, type ProblemDefinition, type ProblemExtensions, type ProblemKind } from "./kinds.js";

/**
 * RFC 9457 problem details. `type` is a relative URI reference naming the kind of problem; clients
 * branch on it (two 409s differ: a stale token is final, a held lock is worth retrying).
 */
export interface ProblemBody {
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

function make<K extends ProblemKind>(kind: K, detail: string | undefined, ...[extensions, headers]: ProblemArgs<K>): Classified {
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
  if (err instanceof StaleTokenError) {
    // Tokens are 64-bit: decimal strings, never JSON numbers (a double would round them).
    return make("stale", err.message, { resource: err.resource, token: err.token.toString(), highest: err.highest.toString() });
  }
  if (err instanceof ResourceMismatchError)
    return make("resourceMismatch", err.message, { key: err.key, resource: err.resource, owner: err.owner });
  if (err instanceof VersionMismatchError)
    return make("version", err.message, { key: err.key, expected: err.expected, actual: err.actual ?? null });
  if (err instanceof ZodError) {
    const errors = err.issues.map((i) => ({ path: i.path.map(String).join("."), message: i.message }));
    return make("invalid", errors.map((e) => (e.path === "" ? e.message : `${e.path}: ${e.message}`)).join("; "), { errors });
  }
  const e = err as { status?: unknown; expose?: unknown; type?: unknown; message?: unknown; code?: unknown } | null;
  // http-errors from body-parser and express (entity.too.large, entity.parse.failed, charset.unsupported, …).
  if (e !== null && typeof e === "object" && typeof e.status === "number" && e.status >= 400 && e.status < 500 && e.expose === true) {
    const detail = typeof e.message === "string" ? e.message : undefined;
    if (e.status === 413) return make("tooLarge", detail);
    if (e.status === 415) return make("mediaType", detail);
    return make("invalid", detail);
  }
  // A path segment that is not valid percent-encoding (express decodes route parameters).
  if (err instanceof URIError) return make("invalid", err.message);
  // The lock and the stores validate every argument before any I/O and throw this class, and only
  // this class, for malformed input. Any other TypeError or RangeError is a bug of ours: a 500.
  if (err instanceof InvalidArgumentError) return make("invalid", err.message, { errors: [{ path: err.argument, message: err.message }] });
  const store = storeProblem(err);
  if (store !== undefined) return store;
  // What a store passes on unchanged: the backend's own error answer, or its client's failure (backend-errors.ts).
  if (err instanceof BackendFailedError)
    return make("backendError", `the ${err.backend} ${err.operation} failed with an error no store classifies; see the gateway's log`, {
      backend: err.backend,
    });
  return make("internal", "the request failed inside the gateway; see its log");
}

/**
 * The stores' failures, by type: whether anything may have been written decides the kind (nothing:
 * `unavailable`; perhaps: `outcomeUnknown`). Details are built from the errors' fields, never their
 * messages: a 5xx answer says what failed, not how the backend worded it.
 */
function storeProblem(err: unknown): Classified | undefined {
  if (err instanceof StoreUnavailableError)
    return make("unavailable", `${err.backend} could not serve the ${err.operation} (${err.reason}); nothing was written, retry later`);
  if (err instanceof ContentionError) return make("unavailable", "the key kept changing under the store; nothing was written, retry later");
  if (err instanceof OutcomeUnknownError)
    return make(
      "outcomeUnknown",
      `the ${err.backend} ${err.operation} was sent and its answer lost: it may have been applied (a conditional write may still land, on the version it expects): retry it, with the same If-Match for a conditional write`,
      { backend: err.backend, ...(err.key === undefined ? {} : { key: err.key }) },
    );
  if (err instanceof StoreSetupError)
    return make("backendMisconfigured", `${err.backend}: ${err.problem}; an operator must act`, {
      backend: err.backend,
      problem: err.problem,
    });
  if (err instanceof CorruptStateError)
    return make(
      "corruptState",
      err.what === "body"
        ? `${err.backend}: the manifest of the key names a body that is missing (deleted while named); a write of the key replaces it; nothing was written`
        : `${err.backend} holds a ${err.what} the store did not write; nothing was written`,
      {
        backend: err.backend,
        what: err.what,
        subject: err.subject,
      },
    );
  return undefined;
}

export function sendProblem(res: Response, problem: Classified): void {
  res.locals.problem = problem.kind;
  res.status(problem.body.status);
  for (const [name, value] of Object.entries(problem.headers)) res.setHeader(name, value);
  res.setHeader("Content-Type", "application/problem+json");
  res.send(JSON.stringify(problem.body));
}
