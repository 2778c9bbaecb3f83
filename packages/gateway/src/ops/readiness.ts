import type { NodeProbe, NodesProbe } from "@fenced/lock/internal";
import type { HealthAnswer, StoreHealth } from "../schemas/answers.js";
import type { StoreCheck } from "../stores/check.js";
import type { StoreName } from "../stores/registry.js";
import type { ReadinessStatus } from "../vocabulary/health-states.js";

/**
 * Readiness: whether this instance should be sent requests. A load balancer pulls an instance that
 * is not ready; every instance shares the same backends, so a rule that made all of them unready at
 * once during one backend's outage would turn the reads that still work into the load balancer's
 * own error. Hence:
 * - not ready (503) when a store answered that it is not set up for this gateway (not migrated, no
 *   such bucket or database, credentials refused): an operator must act, and this instance (its
 *   configuration, its version) cannot serve that store;
 * - not ready when no configured backend serves (the lock serves with a quorum of its nodes): this
 *   instance could only answer 503, as one cut off from the network would;
 * - ready but `degraded` (200) when some backend does not answer while others serve: requests to its
 *   routes answer 503 with Retry-After on every instance alike, the others still serve;
 * - not ready while draining.
 */
export function readinessStatus(checks: RawChecks): ReadinessStatus {
  const stores = Object.values(checks.stores);
  if (stores.some((c) => c.state === "misconfigured")) return "unavailable";
  const serving = [...stores.map((c) => c.state === "up"), ...(checks.redis === undefined ? [] : [checks.redis.ok])];
  if (serving.every(Boolean)) return "ok";
  return serving.some(Boolean) ? "degraded" : "unavailable";
}

/** The checks as made: each node with its address (undefined where the client does not say). */
export interface RawChecks {
  /** Each configured store's, by its name. */
  readonly stores: Readonly<Record<string, StoreCheck>>;
  readonly redis?: (NodesProbe & { readonly addresses: readonly (string | undefined)[] }) | undefined;
}

/** The HTTP status of a readiness answer. */
export function readinessHttpStatus(status: ReadinessStatus): 200 | 503 {
  return status === "ok" || status === "degraded" ? 200 : 503;
}

/** What each setup problem asks of an operator, in a public answer (no address, no name from the configuration). */
const SETUP_TEXT: Readonly<Record<NonNullable<StoreCheck["problem"]>, string>> = {
  "not-migrated": "the store's tables are missing or older than this version: migrate",
  "no-such-database": "the database does not exist",
  "authentication-failed": "the server refused the role's login (password or pg_hba.conf)",
  "permission-denied": "the role may not read the store's tables",
  "no-such-bucket": "the bucket does not exist (404)",
  "access-denied": "the credentials were refused, or may not use the bucket (403)",
  "no-credentials": "no AWS credentials could be loaded",
  "no-such-table": "the table does not exist",
  "no-such-container": "the container does not exist (404)",
};

function storeError(check: StoreCheck, timeoutMs: number): string | undefined {
  const code = check.code === undefined ? "" : ` (${check.code})`;
  switch (check.state) {
    case "up":
      return undefined;
    case "misconfigured":
      return check.problem === undefined ? `not set up${code}` : SETUP_TEXT[check.problem];
    case "refused":
      return `refused the connection${code}`;
    case "timeout":
      return `no answer within ${timeoutMs} ms`;
    case "error":
      return `failed${code}`;
  }
}

function nodeError(node: NodeProbe, timeoutMs: number): string | undefined {
  const code = node.code === undefined ? "" : ` (${node.code})`;
  switch (node.state) {
    case "up":
      return undefined;
    case "pending":
      return "no answer yet when a quorum's outcome was known";
    case "refused":
      return `refused the connection${code}`;
    case "timeout":
      return `no answer within ${timeoutMs} ms`;
    case "error":
      return `failed${code}`;
  }
}

/**
 * The answer: on the admin listener (`admin`) with each node's address and each backend's own
 * message; in public, neither (an error's message may name an address).
 */
export function readinessAnswer(status: ReadinessStatus, checks: RawChecks, timeoutMs: number, admin: boolean): HealthAnswer {
  const store = (check: StoreCheck): StoreHealth => {
    const error = storeError(check, timeoutMs);
    return {
      ok: check.state === "up",
      state: check.state,
      ...(check.problem === undefined ? {} : { problem: check.problem }),
      ...(check.code === undefined ? {} : { code: check.code }),
      ...(error === undefined ? {} : { error }),
      ...(admin && check.detail !== undefined ? { detail: check.detail } : {}),
      ms: check.ms,
    };
  };
  const { stores, redis } = checks;
  // Keyed by the names the answer's schema lists (stores/registry.ts): the checks are made per registered store.
  const each = Object.fromEntries(Object.entries(stores).map(([name, check]) => [name, store(check)])) as Partial<
    Record<StoreName, StoreHealth>
  >;
  return {
    status,
    checks: {
      ...each,
      ...(redis && {
        redis: {
          ok: redis.ok,
          quorum: redis.quorum,
          nodes: redis.nodes.map((node) => {
            const error = nodeError(node, timeoutMs);
            const address = redis.addresses[node.node];
            return {
              ok: node.state === "up",
              state: node.state,
              ...(node.ms === undefined ? {} : { ms: node.ms }),
              ...(node.code === undefined ? {} : { code: node.code }),
              ...(error === undefined ? {} : { error }),
              ...(admin && address !== undefined ? { address } : {}),
              ...(admin && node.detail !== undefined ? { detail: node.detail } : {}),
            };
          }),
        },
      }),
    },
  };
}

/** A node's address as its ioredis client holds it (host:port, or its socket path); undefined for any other client. */
export function nodeAddress(client: unknown): string | undefined {
  const options = (client as { options?: { host?: unknown; port?: unknown; path?: unknown } } | null)?.options;
  if (options === undefined || options === null) return undefined;
  if (typeof options.path === "string" && options.path !== "") return options.path;
  if (typeof options.host !== "string" || typeof options.port !== "number") return undefined;
  return options.host.includes(":") ? `[${options.host}]:${options.port}` : `${options.host}:${options.port}`;
}
