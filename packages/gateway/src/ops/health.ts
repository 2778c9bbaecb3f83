import { performance } from "node:perf_hooks";
import { HeadBucketCommand, type S3Client } from "@aws-sdk/client-s3";
import { StoreSetupError, StoreUnavailableError } from "@fenced/store";
import { type FencedPostgres } from "@fenced/store/postgres";
import { sqlState } from "@fenced/store/internal";
import type { CheckState, SetupProblem } from "./health-states.js";

/**
 * One store's check, as readiness reads it (CheckState). `up`: it answered and is set up. `refused`,
 * `timeout`, `error`: it could not be asked (no server at the address, no answer within the deadline,
 * anything else) — an outage, which every instance sees alike. `misconfigured`: it answered, and
 * refused this gateway's configuration (`problem` says how) — an operator must act, and this
 * instance cannot serve the store until then.
 */
export interface StoreCheck {
  readonly state: CheckState;
  readonly problem?: SetupProblem;
  /** The backend's own code: PostgreSQL's SQLSTATE, S3's HTTP status or error code, a system error's code. */
  readonly code?: string;
  /** The error's message, for an operator (it may name the backend's address: never in a public answer). */
  readonly detail?: string;
  /** How long the check took, in milliseconds. */
  readonly ms: number;
}

/** The key the PostgreSQL readiness check reads: any key will do, the read proves the tables are there. */
const PROBE_KEY = "fenced-gateway/start-check";

/** What a PostgreSQL SQLSTATE the store passes on means for its setup (the server answered, and refused). */
const POSTGRES_SETUP: Readonly<Record<string, SetupProblem>> = {
  "3D000": "no-such-database", // invalid_catalog_name
  "28P01": "authentication-failed", // invalid_password
  "28000": "authentication-failed", // invalid_authorization_specification (pg_hba.conf)
  "42501": "permission-denied", // insufficient_privilege
};

const STORE_UNAVAILABLE: Readonly<Record<string, CheckState>> = {
  refused: "refused",
  timeout: "timeout",
  connection: "error",
  throttled: "error",
};

function message(err: unknown): string {
  return err instanceof Error ? err.message || err.name : String(err);
}

class Deadline extends Error {}

/** A Node system error's code (ECONNREFUSED …), also of an AggregateError of several addresses; undefined for any other error. */
function systemCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  return typeof code === "string" && /^E[A-Z]+$/.test(code) ? code : undefined;
}

/** Runs a check with a deadline: a backend that hangs is a `timeout`, whatever the call would have done. */
async function within(
  timeoutMs: number,
  check: (signal: AbortSignal) => Promise<unknown>,
  judge: (err: unknown) => Omit<StoreCheck, "ms">,
): Promise<StoreCheck> {
  const started = performance.now();
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const ms = (): number => Math.round((performance.now() - started) * 10) / 10;
  try {
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        controller.abort();
        reject(new Deadline(`no answer within ${timeoutMs} ms`));
      }, timeoutMs);
    });
    await Promise.race([check(controller.signal), timeout]);
    return { state: "up", ms: ms() };
  } catch (err) {
    if (err instanceof Deadline) return { state: "timeout", detail: err.message, ms: ms() };
    return { ...judge(err), ms: ms() };
  } finally {
    clearTimeout(timer);
  }
}

/**
 * PostgreSQL: a read of the store's records table, as every request does it (FencedPostgres.get):
 * proves the server answers, the role logs in, and migrate() has run. Read-only.
 */
export function postgresCheck(records: FencedPostgres, timeoutMs: number): Promise<StoreCheck> {
  return within(
    timeoutMs,
    (signal) => records.get(PROBE_KEY, { signal }),
    (err) => {
      const detail = message(err);
      if (err instanceof StoreSetupError) return { state: "misconfigured", problem: "not-migrated", detail };
      if (err instanceof StoreUnavailableError) {
        // The driver's error below it says why, by its system code (ECONNREFUSED, ENOTFOUND …).
        const cause = systemCode(err.cause);
        return {
          state: STORE_UNAVAILABLE[err.reason] ?? "error",
          ...(cause === undefined ? {} : { code: cause }),
          detail: `${detail}${err.cause instanceof Error ? ` (${err.cause.message})` : ""}`,
        };
      }
      const state = sqlState(err);
      const problem = state === undefined ? undefined : POSTGRES_SETUP[state];
      if (problem !== undefined) return { state: "misconfigured", problem, code: state as string, detail };
      return { state: "error", ...(state === undefined ? {} : { code: state }), detail };
    },
  );
}

/** The name of the AWS SDK's error when its credentials provider (chain) could not produce credentials. */
const CREDENTIALS_PROVIDER_ERROR = "CredentialsProviderError";

/**
 * S3: HEAD on the bucket. Its answer's status says what is wrong: 403 the credentials (or their
 * rights on the bucket), 404 the bucket; no answer at all, the endpoint. Read-only.
 */
export function s3Check(client: S3Client, bucket: string, timeoutMs: number): Promise<StoreCheck> {
  return within(
    timeoutMs,
    (abortSignal) => client.send(new HeadBucketCommand({ Bucket: bucket }), { abortSignal }),
    (err) => {
      const detail = message(err);
      const { name, code, $metadata } = (typeof err === "object" && err !== null ? err : {}) as {
        name?: unknown;
        code?: unknown;
        $metadata?: { httpStatusCode?: unknown };
      };
      if (name === CREDENTIALS_PROVIDER_ERROR) return { state: "misconfigured", problem: "no-credentials", code: name, detail };
      const status = $metadata?.httpStatusCode;
      if (status === 403) return { state: "misconfigured", problem: "access-denied", code: "403", detail };
      if (status === 404) return { state: "misconfigured", problem: "no-such-bucket", code: "404", detail };
      if (typeof status === "number") return { state: "error", code: String(status), detail };
      // No HTTP answer: a system error's code says why (ECONNREFUSED: nothing listens at the endpoint).
      const system = systemCode(err) ?? (typeof code === "string" ? code : undefined);
      return { state: system === "ECONNREFUSED" ? "refused" : "error", ...(system === undefined ? {} : { code: system }), detail };
    },
  );
}
