import { describe, expect, it } from "vitest";
import { VIOLATION_KINDS } from "./checker.js";
import { STORE_FAULT_KINDS as STORE_FAULTS, type Backend } from "./history.js";
import { runChaos } from "./suite.js";

/**
 * Quick mode on the two emulated stores: DynamoDB (dynalite) and Azure Blob (azurite), each a Node
 * process of its own behind the workers' delay proxies. Only the two configurations that make the
 * point — `unfenced` loses writes, `full` loses none — under chaos.test.ts's seed and nemesis: Redis
 * pauses, kills and wipe rounds, worker pauses between read and write, delays, connection resets,
 * and the store server paused (dynalite also killed and restarted with its LevelDB; azurite is
 * never killed: it saves its metadata every 5 s, and a kill would lose writes it had answered).
 */

// Seed 1's schedule needs about 6 s (scheduleCoverageMs) to play its first wipe round and the store's
// first faults, however soon the operations are done. Measured here (2 cores): 16–29 operations a
// second per configuration, the slowest DynamoDB `full`; 100 are done in that window, so no run
// outlasts the schedule for its operations. About 45 s for both backends, servers included.
const OPS: Record<Extract<Backend, "dynamodb" | "azure-blob">, number> = { dynamodb: 100, "azure-blob": 100 };
const SEED = 1;

const violations = (v: Readonly<Record<string, number>> | undefined): number => VIOLATION_KINDS.reduce((sum, k) => sum + (v?.[k] ?? 0), 0);

describe("chaos on the emulated stores, quick mode", () => {
  for (const backend of ["dynamodb", "azure-blob"] as const) {
    it(`${backend}: unfenced loses writes, full loses none`, { timeout: 180_000 }, async () => {
      const summary = await runChaos({ ops: OPS[backend], seed: SEED, configs: ["unfenced", "full"], backends: [backend] });
      console.log(JSON.stringify(summary));
      const runs = summary.runs[backend];
      expect(summary.faults["wipe-redis"]).toBeGreaterThan(0);
      expect(summary.faults.reset).toBeGreaterThan(0);
      // The emulator's process was stopped (and dynalite's killed and restarted) while the workers ran.
      expect(summary.faults[STORE_FAULTS[backend].pause]).toBeGreaterThan(0);
      const kill = STORE_FAULTS[backend].kill;
      if (kill !== undefined) expect(summary.faults[kill]).toBeGreaterThan(0);
      for (const mode of ["unfenced", "full"] as const) {
        const run = runs?.[mode];
        expect(run?.ops, mode).toBeGreaterThanOrEqual(OPS[backend]);
        expect(run?.liveness, mode).toMatchObject({ late: 0, unanswered: 0 });
        expect(run?.deaths, mode).toEqual([]);
        expect(run?.byOutcome.error, `${mode}: ${JSON.stringify(run?.errors)}`).toBe(0);
      }
      expect(violations(runs?.full?.violations), JSON.stringify(runs?.full?.firstViolation)).toBe(0);
      expect(runs?.unfenced?.violations["lost-update"], JSON.stringify(runs?.unfenced?.violations)).toBeGreaterThan(0);
      expect(summary.failures).toEqual([]);
      expect(summary.pass).toBe(true);
    });
  }
});
