import { describe, expect, it } from "vitest";
import { VIOLATION_KINDS } from "./checker.js";
import { STORE_FAULT_KINDS as STORE_FAULTS, type Backend } from "./history.js";
import { runChaos } from "./suite.js";

/**
 * Quick mode through the gateway (`pnpm chaos --via gateway`): the same three configurations under
 * the same seeded schedule as chaos.test.ts, but the workers take their leases from a fenced gateway
 * running as a process of its own, and in "ratchet" and "full" read and write through it over HTTP
 * with the fence credential of their lease (an ordinary API key: no plain tokens). The nemesis also
 * pauses the gateway process, and the delays act on the workers' links to it; a reset of a worker's
 * store link cuts the gateway's own connections to the store. The store server is paused and killed
 * as in the library's quick mode, and the gateway must answer 503 (unavailable, outcome unknown) in
 * time. Smaller than the library's quick mode: the HTTP hop and a gateway start per configuration
 * cost time.
 */

const OPS: Record<Extract<Backend, "postgres" | "s3">, number> = { postgres: 300, s3: 120 };
// Seed 1 wipes a majority of the Redis nodes for the first time at 2.9 s, pauses the store server at
// 3.6 s and kills it at 5.2 s (the first store fault is a pause, a kill soon follows: fault-streams.ts).
const SEED = 1;

const violations = (v: Readonly<Record<string, number>> | undefined): number => VIOLATION_KINDS.reduce((sum, k) => sum + (v?.[k] ?? 0), 0);

describe("chaos through the gateway, quick mode", () => {
  for (const backend of ["postgres", "s3"] as const) {
    it(
      `${backend}: unfenced writes break under leases from the gateway; fenced writes through it do not`,
      { timeout: 240_000 },
      async () => {
        const summary = await runChaos({
          ops: OPS[backend],
          seed: SEED,
          configs: ["unfenced", "ratchet", "full"],
          backends: [backend],
          via: "gateway",
        });
        console.log(JSON.stringify(summary));
        const runs = summary.runs[backend];
        expect(summary.via).toBe("gateway");
        // Every run finished: its operations done in time, no worker and no gateway lost on the way.
        for (const mode of ["unfenced", "ratchet", "full"] as const) {
          const run = runs?.[mode];
          expect(run?.ops, mode).toBeGreaterThanOrEqual(OPS[backend]);
          expect(run?.timedOut, mode).toBe(false);
          expect(run?.problems, mode).toEqual([]);
          expect(run?.byOutcome.ok, mode).toBeGreaterThan(0);
          expect(run?.deaths, mode).toEqual([]);
          // Every call answered within the deadline plus the margin (stalls of the gateway and its link aside).
          expect(run?.liveness, mode).toMatchObject({ late: 0, unanswered: 0 });
          expect(run?.byOutcome.error, `${mode}: ${JSON.stringify(run?.errors)}`).toBe(0);
        }
        expect(summary.faults[STORE_FAULTS[backend].pause]).toBeGreaterThan(0);
        expect(summary.faults[STORE_FAULTS[backend].kill]).toBeGreaterThan(0);
        expect(summary.faults.reset).toBeGreaterThan(0);
        expect(summary.faults["wipe-redis"]).toBeGreaterThan(0);
        expect(violations(runs?.full?.violations), JSON.stringify(runs?.full?.firstViolation)).toBe(0);
        expect(violations(runs?.unfenced?.violations)).toBeGreaterThan(0);
      },
    );
  }
});
