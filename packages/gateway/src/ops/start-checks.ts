import { BackendFailedError } from "../problems/backend-errors.js";
import { classify } from "../problems/problem.js";
import type { BackendHealth } from "./health.js";

/**
 * Why the gateway will not start: one line for an operator, naming the backend and what to do. The
 * CLI writes it to stderr and exits 2; `--no-start-checks` starts anyway (a backend that comes up
 * later is used as soon as it answers: every request reaches its backend afresh).
 */
export class StartRefusedError extends Error {
  override readonly name = "StartRefusedError";
}

const ANYWAY = "or pass --no-start-checks to start anyway";

/** What the start checks read of GET /healthz's report. */
export interface StartHealth {
  readonly checks: {
    readonly postgres?: BackendHealth;
    readonly s3?: BackendHealth;
    readonly redis?: { readonly ok: boolean; readonly quorum: number; readonly nodes: readonly BackendHealth[] };
  };
}

/**
 * The first configured backend that does not answer within the health deadline, as a refusal. The
 * lock needs a quorum of its nodes answering PING: with fewer, no lease could be granted.
 */
export function refuseUnhealthy(report: StartHealth, timeoutMs: number): void {
  const { postgres, s3, redis } = report.checks;
  if (redis !== undefined && !redis.ok) {
    const answered = redis.nodes.filter((n) => n.ok).length;
    const first = redis.nodes.find((n) => !n.ok)?.error ?? "no answer";
    throw new StartRefusedError(
      `the lock has no quorum: ${answered} of ${redis.nodes.length} Redis nodes answered PING within ${timeoutMs} ms, ` +
        `${redis.quorum} are needed (${first}); start them, ${ANYWAY}`,
    );
  }
  if (postgres !== undefined && !postgres.ok)
    throw new StartRefusedError(`PostgreSQL did not answer SELECT 1 within ${timeoutMs} ms (${postgres.error ?? "no answer"}); ${ANYWAY}`);
  if (s3 !== undefined && !s3.ok)
    throw new StartRefusedError(
      `S3 did not confirm the bucket (HeadBucket) within ${timeoutMs} ms (${s3.error ?? "no answer"}): check the endpoint, the credentials and that the bucket exists; ${ANYWAY}`,
    );
}

/** What an operator can do when PostgreSQL refuses the start's statement, by SQLSTATE. */
const POSTGRES_FIX: Readonly<Record<string, string>> = {
  // insufficient_privilege
  "42501":
    "grant the gateway's role CREATE on the database and on the schema, or migrate once with a role that may and start with --no-migrate",
  // invalid_catalog_name
  "3D000": "create the database, or name an existing one in the connection string",
  // invalid_authorization_specification, invalid_password
  "28000": "check the role and the server's pg_hba.conf",
  "28P01": "check the role's password",
};

/** The refusal line of a backend's own error answer to the start's migrate, read or verify. */
function backendRefusal(err: BackendFailedError): StartRefusedError {
  const fix =
    err.backend === "postgres"
      ? (POSTGRES_FIX[err.code] ??
        (err.operation === "migrate"
          ? "check the role's privileges on the database and the schema, or start with --no-migrate"
          : "check the connection string and the role's privileges"))
      : "check the endpoint, the credentials and that they may read, write and delete objects in the bucket" +
        (err.operation === "verify" ? ", or start with --no-verify" : "");
  const who = err.backend === "postgres" ? "PostgreSQL" : "S3";
  return new StartRefusedError(`${who} refused the ${err.operation} (${err.code}): ${fix}; ${ANYWAY}`, { cause: err });
}

/**
 * A failure of the stores' start work (migrate, verify) as a refusal, classified as a request's
 * failure would be (problems/problem.ts): a backend unavailable, not set up, or refusing the call
 * with an error of its own; undefined for anything else.
 */
export function startRefusal(err: unknown): StartRefusedError | undefined {
  if (err instanceof BackendFailedError) return backendRefusal(err);
  const { kind, body } = classify(err);
  if (kind === "backendMisconfigured") {
    const fix =
      body.problem === "not-migrated"
        ? "run the gateway without --no-migrate once"
        : body.problem === "no-such-bucket"
          ? "create the bucket"
          : "use an S3 backend that honours If-Match and If-None-Match";
    return new StartRefusedError(`${String(body.backend)} is not set up for the store (${String(body.problem)}): ${fix}; ${ANYWAY}`, {
      cause: err,
    });
  }
  if (kind === "unavailable")
    return new StartRefusedError(`a backend could not serve the start's migrate or verify: ${body.detail ?? "unavailable"}; ${ANYWAY}`, {
      cause: err,
    });
  return undefined;
}
