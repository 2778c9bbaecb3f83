import type { Express } from "express";
import type { NodesProbe } from "@fenced/lock/internal";
import type { HealthAnswer, LivenessAnswer } from "../schemas/answers.js";
import type { StoreCheck } from "../stores/check.js";
import { readinessAnswer, readinessHttpStatus, readinessStatus, type RawChecks } from "./readiness.js";

/** The lock's nodes as the lease routes probe them, each with its address where known. */
export type LockProbe = NodesProbe & { readonly addresses: readonly (string | undefined)[] };

/** What readiness checks: each configured backend, and whether the instance is stopping. */
export interface ReadinessSources {
  /** Each configured store, by its name (stores/registry.ts), and its check. */
  readonly stores: readonly { readonly name: string; check(timeoutMs: number): Promise<StoreCheck> }[];
  /** everyNode: wait for each node's answer, not only for the quorum's outcome (probeNodes). */
  readonly lock?: { probe(timeoutMs: number, everyNode?: boolean): Promise<LockProbe> } | undefined;
  /** Each backend's deadline. */
  readonly timeoutMs: number;
  draining(): boolean;
}

export interface Readiness {
  /**
   * Every configured backend checked at once; the answer as the admin listener gives it. `everyNode`:
   * each lock node's own answer, none `pending` (the start check, which names each node that did not answer).
   */
  report(options?: { readonly everyNode?: boolean }): Promise<HealthAnswer>;
  /** The answer for a listener: public answers carry no address and no backend's own message. */
  answer(admin: boolean): Promise<HealthAnswer>;
}

export function gatewayReadiness(sources: ReadinessSources): Readiness {
  const { timeoutMs } = sources;
  // One round of checks at a time, its result shared by every request that asks meanwhile: a flood of
  // unauthenticated /readyz requests costs each backend one check at a time (a PostgreSQL connection
  // that a stalled server holds to the store's deadline), never one per request.
  let round: Promise<RawChecks> | undefined;
  const checkAll = (everyNode: boolean): Promise<RawChecks> =>
    Promise.all([
      Promise.all(sources.stores.map(async (store) => [store.name, await store.check(timeoutMs)] as const)),
      sources.lock?.probe(timeoutMs, everyNode),
    ]).then(([stores, redis]) => ({ stores: Object.fromEntries(stores), redis }));
  const checks = (): Promise<RawChecks> => (round ??= checkAll(false).finally(() => (round = undefined)));
  const check = async (admin: boolean, everyNode = false): Promise<HealthAnswer> => {
    if (sources.draining()) return { status: "draining", checks: {} };
    // A check of every node is made once (at start): not shared with the rounds /readyz shares.
    const raw = everyNode ? await checkAll(true) : await checks();
    return readinessAnswer(readinessStatus(raw), raw, timeoutMs, admin);
  };
  return { report: (options) => check(true, options?.everyNode === true), answer: (admin) => check(admin) };
}

/**
 * Unauthenticated, for load balancers and orchestrators. /livez: the process is alive and its event
 * loop answers (no backend is asked, also while draining: restarting a process that drains would
 * cut its requests). /readyz, and /healthz as before: readiness (readiness.ts).
 */
export function healthRoutes(app: Express, readiness: Readiness, admin: boolean): void {
  app.get("/livez", (_req, res) => {
    res.json({ status: "ok" } satisfies LivenessAnswer);
  });
  for (const path of ["/readyz", "/healthz"])
    app.get(path, async (_req, res) => {
      const answer = await readiness.answer(admin);
      res.status(readinessHttpStatus(answer.status)).json(answer);
    });
}
