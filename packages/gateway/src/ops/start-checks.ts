import { BackendFailedError } from "../problems/backend-errors.js";
import { classify } from "../problems/problem.js";
import type { HealthAnswer } from "../schemas/answers.js";

/**
 * Why the gateway will not start: one line for an operator, naming the backend and what to do. The
 * CLI writes it to stderr and exits 2; `--no-start-checks` starts anyway (a backend that comes up
 * later is used as soon as it answers: every request reaches its backend afresh).
 */
export class StartRefusedError extends Error {
  override readonly name = "StartRefusedError";
}

const ANYWAY = "or pass --no-start-checks to start anyway";

type StoreAnswer = NonNullable<HealthAnswer["checks"]["postgres"]>;

/** The backend's own words, after the fix: what an operator searches for. */
function said(check: { code?: string | undefined; detail?: string | undefined }): string {
  const parts = [check.code, check.detail].filter((p) => p !== undefined && p !== "");
  return parts.length === 0 ? "" : ` (${parts.join(": ")})`;
}

/** Why PostgreSQL fails the start check, and what to do: by what it answered, or that it did not. */
function postgresRefusal(check: StoreAnswer, timeoutMs: number): string {
  switch (check.problem) {
    case "no-such-database":
      return `PostgreSQL answered that the database does not exist${said(check)}: create it (createdb), or name an existing one in the connection string`;
    case "authentication-failed":
      return `PostgreSQL refused the login${said(check)}: check the user and password in the connection string, and the server's pg_hba.conf`;
    case "permission-denied":
      return `PostgreSQL refused the role access to the store's tables${said(check)}: grant it, or use the role that migrated them`;
    default:
  }
  switch (check.state) {
    case "refused":
      return `PostgreSQL refused the connection${said(check)}: is the server running, and are the connection string's host and port its own?`;
    case "timeout":
      return `PostgreSQL did not answer within ${timeoutMs} ms: check that its host is reachable from here (a firewall that drops packets?)`;
    default:
      return `PostgreSQL could not be asked${said(check)}: check the connection string`;
  }
}

/** Why S3 fails the start check: HeadBucket's answer says which of credentials, bucket or endpoint. */
function s3Refusal(check: StoreAnswer, timeoutMs: number): string {
  switch (check.problem) {
    case "access-denied":
      return `S3 refused the credentials (403${said({ detail: check.detail })}): check the access key id and secret, and that they may use the bucket`;
    case "no-such-bucket":
      return "S3 answered that the bucket does not exist (404): create it, or name an existing one (s3.bucket)";
    case "no-credentials":
      return `no S3 credentials could be loaded${said({ detail: check.detail })}: give s3.accessKeyId and s3.secretAccessKey, or set up the AWS SDK's credential chain`;
    default:
  }
  switch (check.state) {
    case "refused":
      return `S3 refused the connection${said(check)}: check the endpoint URL (s3.endpoint) and that the server runs`;
    case "timeout":
      return `S3 did not answer within ${timeoutMs} ms: check the endpoint URL (s3.endpoint) and that it is reachable from here`;
    default:
      return `S3 did not confirm the bucket${said(check)}: check the endpoint, the credentials and the bucket`;
  }
}

/** The lock without a quorum: each node that did not answer, by address, and why (as the lock names it). */
function lockRefusal(redis: NonNullable<HealthAnswer["checks"]["redis"]>): string {
  const answered = redis.nodes.filter((n) => n.ok).length;
  const failed = redis.nodes.flatMap((n, i) =>
    n.ok
      ? []
      : [`node ${i}${n.address === undefined ? "" : ` at ${n.address}`}: ${n.state}${n.error === undefined ? "" : ` (${n.error})`}`],
  );
  return (
    `the lock has no quorum: ${answered} of ${redis.nodes.length} Redis nodes answered PING, ${redis.quorum} are needed ` +
    `(${failed.join("; ")}); start them or correct their URLs`
  );
}

/**
 * The first configured backend whose check failed, as a refusal naming the fix. The lock needs a
 * quorum of its nodes answering PING: with fewer, no lease could be granted. A store's missing
 * tables are not refused here: the start's migrate creates them (with --no-migrate, its read refuses).
 */
export function refuseUnhealthy(report: HealthAnswer, timeoutMs: number): void {
  const { postgres, s3, redis } = report.checks;
  if (redis !== undefined && !redis.ok) throw new StartRefusedError(`${lockRefusal(redis)}; ${ANYWAY}`);
  if (postgres !== undefined && !postgres.ok && postgres.problem !== "not-migrated")
    throw new StartRefusedError(`${postgresRefusal(postgres, timeoutMs)}; ${ANYWAY}`);
  if (s3 !== undefined && !s3.ok) throw new StartRefusedError(`${s3Refusal(s3, timeoutMs)}; ${ANYWAY}`);
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
