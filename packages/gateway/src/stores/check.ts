import { performance } from "node:perf_hooks";

/** A store's check (StoreCheck says what each means). */
export const CHECK_STATES = ["up", "refused", "timeout", "error", "misconfigured"] as const;
export type CheckState = (typeof CHECK_STATES)[number];

/** What a store answered that means an operator must act: every registered store's problems, one list. */
export const SETUP_PROBLEMS = [
  "not-migrated",
  "no-such-database",
  "authentication-failed",
  "permission-denied",
  "no-such-bucket",
  "access-denied",
  "no-credentials",
  "no-such-table",
  "no-such-container",
] as const;
export type SetupProblem = (typeof SETUP_PROBLEMS)[number];

/**
 * One store's check, as readiness reads it (CheckState). `up`: it answered and is set up. `refused`,
 * `timeout`, `error`: it could not be asked (no server at the address, no answer within the deadline,
 * anything else) — an outage, which every instance sees alike. `misconfigured`: it answered, and
 * refused this gateway's configuration (`problem` says how) — an operator must act, and this
 * instance cannot serve the store until then.
 */
export interface StoreCheck {
  readonly state: CheckState;
  readonly problem?: SetupProblem | undefined;
  /** The backend's own code: PostgreSQL's SQLSTATE, S3's HTTP status or error code, a system error's code. */
  readonly code?: string | undefined;
  /** The error's message, for an operator (it may name the backend's address: never in a public answer). */
  readonly detail?: string | undefined;
  /** How long the check took, in milliseconds. */
  readonly ms: number;
}

export function message(err: unknown): string {
  return err instanceof Error ? err.message || err.name : String(err);
}

class Deadline extends Error {}

/** A Node system error's code (ECONNREFUSED …), also of an AggregateError of several addresses; undefined for any other error. */
export function systemCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  return typeof code === "string" && /^E[A-Z]+$/.test(code) ? code : undefined;
}

/** Runs a check with a deadline: a backend that hangs is a `timeout`, whatever the call would have done. */
export async function within(
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

/** The backend's own words, after the fix: what an operator searches for. */
export function said(check: { readonly code?: string | undefined; readonly detail?: string | undefined }): string {
  const parts = [check.code, check.detail].filter((p) => p !== undefined && p !== "");
  return parts.length === 0 ? "" : ` (${parts.join(": ")})`;
}
