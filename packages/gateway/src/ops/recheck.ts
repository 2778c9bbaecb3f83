import type { Logger } from "pino";
import type { HealthAnswer, StoreHealth } from "../schemas/answers.js";
import { storeNamed } from "../stores/registry.js";

/** How often a gateway started with its start work undone looks again (recheckInBackground). */
export const RECHECK_INTERVAL_MS = 5_000;

export interface Recheck {
  /** Resolves once every store answered set up, or the gateway drains, or stop() was called. */
  readonly done: Promise<void>;
  stop(): void;
}

/** What a recheck calls of a gateway (app.ts' Gateway). */
export interface Rechecked {
  health(): Promise<HealthAnswer>;
  prepare(options: { readonly migrate?: boolean; readonly verify?: boolean }): Promise<void>;
}

type Stores = Readonly<Record<string, StoreHealth>>;

/** The stores' checks of a readiness answer: every check but the lock's. */
function storesOf(checks: HealthAnswer["checks"]): Stores {
  const { redis: _lock, ...stores } = checks;
  return Object.fromEntries(Object.entries(stores).filter((entry): entry is [string, StoreHealth] => entry[1] !== undefined));
}

/** The titles of the stores whose tables are missing ("PostgreSQL"). */
function notMigrated(stores: Stores): string[] {
  return Object.entries(stores).flatMap(([name, c]) => (c.problem === "not-migrated" ? [storeNamed(name)?.title ?? name] : []));
}

/** Each store's state in a word: what a change of is logged. */
function summary(checks: Stores): string {
  return Object.entries(checks)
    .map(([name, c]) => `${name} ${c.problem ?? c.state}`)
    .join(", ");
}

/**
 * After a start whose checks were off and whose start work failed (a backend down, or not set up):
 * looks at the stores again every `intervalMs`, read-only, as readiness does (GET /readyz says 503
 * while a store is not set up), and logs each change. PostgreSQL's tables are created from here only
 * when `migrate` says so (the configuration's migrateInBackground): otherwise whoever owns the
 * schema migrates it, and the gateway is ready from the next check on. Ends once every store is set
 * up, or when the gateway drains.
 */
export function recheckInBackground(
  gateway: Rechecked,
  options: { readonly intervalMs: number; readonly migrate: boolean; readonly logger: Logger },
): Recheck {
  const { intervalMs, migrate, logger } = options;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let wake = (): void => undefined;
  let last = "";
  const pause = (): Promise<void> =>
    new Promise((resolve) => {
      if (stopped) return resolve();
      wake = resolve;
      timer = setTimeout(resolve, intervalMs);
      // A gateway that stops is not held up by its next look.
      timer.unref();
    });
  const look = async (): Promise<boolean> => {
    let report = await gateway.health();
    // Stopped meanwhile: the backends are about to close; no migration starts now.
    if (stopped) return false;
    const missing = notMigrated(storesOf(report.checks));
    if (migrate && missing.length > 0) {
      try {
        await gateway.prepare({ migrate: true, verify: false });
        logger.info(`migrated the ${missing.join(" and ")} tables from the background check (migrateInBackground)`);
        report = await gateway.health();
      } catch (err) {
        logger.warn({ err }, "the background migration failed; trying again later");
      }
    }
    if (report.status === "draining") return true;
    const stores = storesOf(report.checks);
    const unmigrated = notMigrated(stores);
    const now = summary(stores);
    const ready = Object.values(stores).every((c) => c.ok);
    if (now !== last)
      if (ready) logger.info({ stores: now }, "every store answers and is set up: the start's checks pass now");
      else
        logger.warn(
          { stores: now, migrate },
          migrate || unmigrated.length === 0
            ? "a store is still not set up or not answering; looking again"
            : `${unmigrated.join(" and ")}'s tables are missing: migrate them (a gateway started with migrate, or migrateInBackground); looking again`,
        );
    last = now;
    return ready;
  };
  const done = (async () => {
    while (!stopped) {
      try {
        if (await look()) return;
      } catch (err) {
        logger.warn({ err }, "the background check failed; looking again");
      }
      await pause();
    }
  })();
  return {
    done,
    stop() {
      stopped = true;
      clearTimeout(timer);
      wake();
    },
  };
}
