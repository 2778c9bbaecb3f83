import { describe, expect, it } from "vitest";
import { VIOLATION_KINDS } from "./checker.js";
import { STORE_FAULT_KINDS as STORE_FAULTS, type Backend } from "./history.js";
import { runChaos, type RunSummary } from "./suite.js";

/**
 * Quick mode of `pnpm chaos --pairs`: every operation takes one lease of two of three resources
 * (drawn at random, in random order, so every pair overlaps every other and pairs come in both
 * orders) and increments a counter per resource under it, while the nemesis does what it does in
 * chaos.test.ts (Redis pauses, kills and wipe rounds, worker pauses between read and write, store
 * pauses and kills, resets). Each half of a pair is judged on its own resource; on PostgreSQL, where
 * both counters are written in one transaction, a pair must also land whole or not at all. Only the
 * two configurations that make the point (unfenced breaks, full does not), and fewer operations
 * than chaos.test.ts: the single-resource runs already cover ratchet and the longer histories.
 */

const OPS: Record<Extract<Backend, "postgres" | "s3">, number> = { postgres: 300, s3: 100 };
// Seed 1, as chaos.test.ts: a worker paused between read and write within the first second, a wipe
// round at 2.9 s, the store server paused at 3.6 s and killed at 5.2 s.
const SEED = 1;

const violations = (v: Readonly<Record<string, number>> | undefined): number => VIOLATION_KINDS.reduce((sum, k) => sum + (v?.[k] ?? 0), 0);
/** What a run met and made of it, short enough to stay in a failure's message (the summary line is too long for a CI log's tail). */
const ofRun = (run: RunSummary | undefined): string =>
  JSON.stringify(
    run && {
      violations: run.violations,
      faults: Object.fromEntries(Object.entries(run.faults).filter(([, n]) => n > 0)),
      missed: run.faultsMissed,
      outcomes: run.byOutcome,
      failures: run.failByReason,
      repeatedTokens: run.repeatedTokens,
      tokenRegressions: run.tokenRegressions,
      durationMs: run.durationMs,
    },
  );

describe("chaos with leases of two resources, quick mode", () => {
  for (const backend of ["postgres", "s3"] as const) {
    it(
      `${backend}: unfenced pairs break the token order per resource; fenced pairs lose nothing${backend === "postgres" ? " and never land by halves" : ""}`,
      { timeout: 180_000 },
      async () => {
        const summary = await runChaos({ ops: OPS[backend], seed: SEED, configs: ["unfenced", "full"], backends: [backend], pairs: true });
        console.log(JSON.stringify(summary));
        const runs = summary.runs[backend];
        expect(summary.pairs).toBe(true);
        expect(summary.resources).toBe(3);
        expect(summary.faults[STORE_FAULTS[backend].kill]).toBeGreaterThan(0);
        for (const mode of ["unfenced", "full"] as const) {
          const run = runs?.[mode];
          // Each run met a wipe round and the store's pause, not only the two together (summary.faults
          // sums them): the first store fault always finds the server healthy, and a round starts with
          // every node free. The kill after the pause is asserted on the sum, above: it is missed if the
          // pause has not ended when it comes, which late timers on a busy machine can make so.
          for (const kind of ["wipe-redis", STORE_FAULTS[backend].pause] as const)
            expect(run?.faults[kind], `${mode}: ${kind} ${ofRun(run)}`).toBeGreaterThan(0);
          // Every pair is two operations, one per resource, and every half was answered.
          expect(run?.pairs?.ops, mode).toBeGreaterThanOrEqual(OPS[backend]);
          expect(run?.ops, mode).toBe(2 * (run?.pairs?.ops ?? 0));
          expect(run?.liveness, mode).toMatchObject({ late: 0, unanswered: 0 });
          expect(run?.deaths, mode).toEqual([]);
          expect(run?.byOutcome.error, `${mode}: ${JSON.stringify(run?.errors)}`).toBe(0);
          // PostgreSQL writes a pair in one transaction, and atomicity was judged; S3 writes each counter on its own.
          if (backend === "postgres") {
            expect(run?.pairs?.atomic, mode).toBe(run?.pairs?.ops);
            expect(run?.pairs?.judged, mode).toBeGreaterThan(0);
          } else expect(run?.pairs?.atomic, mode).toBe(0);
          expect(run?.violations["torn-pair"], mode).toBe(0);
        }
        expect(violations(runs?.full?.violations), JSON.stringify(runs?.full?.firstViolation)).toBe(0);
        // Unfenced, the pairs break the token order per resource: a write under a lower token lands after
        // a higher one was acknowledged (token-decrease), two holders share a token, or an acknowledged
        // increment is lost. Which of them a quick run shows depends on where its pauses fall (a run whose
        // store was down through its worker pauses showed token-decrease and duplicate-token, no lost update).
        expect(violations(runs?.unfenced?.violations), `${ofRun(runs?.unfenced)}; ${JSON.stringify(summary.failures)}`).toBeGreaterThan(0);
        expect(summary.failures).toEqual([]);
        expect(summary.pass).toBe(true);
      },
    );
  }
});
