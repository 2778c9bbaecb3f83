import type { StoreSetupError } from "@fenced/store";
import { BackendFailedError } from "../problems/backend-errors.js";
import { classify } from "../problems/problem.js";
import type { HealthAnswer } from "../schemas/answers.js";
import { STORES, storeNamed, type StoreName } from "../stores/registry.js";

/**
 * Why the gateway will not start: one line for an operator, naming the backend and what to do. The
 * CLI writes it to stderr and exits 2; `--no-start-checks` starts anyway (a backend that comes up
 * later is used as soon as it answers: every request reaches its backend afresh).
 */
export class StartRefusedError extends Error {
  override readonly name = "StartRefusedError";
}

const ANYWAY = "or pass --no-start-checks to start anyway";

/** What an operator does about each setup a store finds missing (StoreSetupError's `problem`): at start, and in a sweep. */
export const SETUP_FIXES: Readonly<Record<StoreSetupError["problem"], string>> = {
  "not-migrated": "run the gateway without --no-migrate once",
  "no-such-bucket": "check the bucket's name, or create it",
  "no-such-table": "check the table's name, or create it (partition key `key`, a String)",
  "no-such-container": "check the container's name, or create it",
  "conditional-writes-unsupported": "use a backend that honours If-Match and If-None-Match (or its item conditions)",
};

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
  const { redis } = report.checks;
  if (redis !== undefined && !redis.ok) throw new StartRefusedError(`${lockRefusal(redis)}; ${ANYWAY}`);
  for (const store of STORES) {
    const check = report.checks[store.name as StoreName];
    const refusal = check === undefined || check.ok ? undefined : store.startRefusal(check, timeoutMs);
    if (refusal !== undefined) throw new StartRefusedError(`${refusal}; ${ANYWAY}`);
  }
}

/** The refusal line of a backend's own error answer to the start's migrate, read or verify. */
function backendRefusal(err: BackendFailedError): StartRefusedError {
  const store = storeNamed(err.backend);
  const fix = store?.backendFix(err.code, err.operation) ?? "check the backend's configuration";
  return new StartRefusedError(`${store?.title ?? err.backend} refused the ${err.operation} (${err.code}): ${fix}; ${ANYWAY}`, {
    cause: err,
  });
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
    // The backendMisconfigured kind's problem is a StoreSetupError's (problems/kinds.ts).
    const fix = SETUP_FIXES[body.problem as StoreSetupError["problem"]];
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
