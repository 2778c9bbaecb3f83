import { describe, expect, it, vi } from "vitest";
import { loadSweepConfig } from "../config.js";
import { sweepCommand } from "../sweep.js";
import { EVERY_DRIVER } from "./drivers.js";
import { postgresRecords } from "./postgres.js";
import { STORES } from "./registry.js";
import { s3Objects } from "./s3.js";

describe("store drivers", () => {
  it("each registration loads the driver createGateway serves it with, and every store has one", async () => {
    // The bin serves a store with what its registration's load() resolves to, createGateway with
    // EVERY_DRIVER: one driver per store, whichever way the gateway was made.
    expect(Object.keys(EVERY_DRIVER).sort()).toEqual(STORES.map((store) => store.name).sort());
    for (const store of STORES) expect(await store.load(), store.name).toBe(EVERY_DRIVER[store.name as keyof typeof EVERY_DRIVER]);
  });

  it("each store's sweep is said once: its registration's reason why nothing is left behind, or its driver's sweep", async () => {
    for (const store of STORES) {
      const driver = await store.load();
      expect(store.nothingToSweep === undefined, store.name).toBe(driver.sweep !== undefined);
    }
  });

  it("a store with nothing to sweep is answered without loading its driver", async () => {
    // PostgreSQL's driver loads pg and @fenced/store/postgres: the sweep's one line for it needs neither.
    const load = vi.spyOn(postgresRecords, "load").mockRejectedValue(new Error("Cannot find package 'pg'"));
    try {
      const { code, out, err } = await dryRun({ postgres: "postgres://gateway@db.invalid/fenced" });
      expect(err).toEqual([expect.stringMatching(/^fenced-gateway sweep: PostgreSQL: nothing to sweep: .*one transaction/)]);
      expect(code).toBe(0);
      expect(JSON.parse(out.join(""))).toEqual({ postgres: { swept: false, why: postgresRecords.nothingToSweep } });
      expect(load).not.toHaveBeenCalled();
    } finally {
      load.mockRestore();
    }
  });

  it("a driver that cannot be loaded fails the sweep with one line, exit 1, and no report", async () => {
    // As an install without the S3 SDK would: the registration's import() rejects.
    const load = vi.spyOn(s3Objects, "load").mockRejectedValue(new Error("Cannot find package '@aws-sdk/client-s3'"));
    try {
      const { code, out, err } = await dryRun({ s3Bucket: "bucket", s3Endpoint: "http://127.0.0.1:9" });
      expect(code).toBe(1);
      expect(err).toEqual([
        expect.stringMatching(/^fenced-gateway sweep: the S3 store's SDK could not be loaded: reinstall the gateway \(Cannot find package/),
      ]);
      expect(out).toEqual([]);
    } finally {
      load.mockRestore();
    }
  });
});

/** A dry-run sweep of the configuration `flags` give, in process: its exit code, and what it wrote on stdout and stderr. */
async function dryRun(flags: Parameters<typeof loadSweepConfig>[0]): Promise<{ code: number; out: string[]; err: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await sweepCommand(
    loadSweepConfig(flags, {}),
    { minAgeMs: 0, dryRun: true },
    { stdout: (t) => void out.push(t), stderr: (t) => void err.push(t), signals: [] },
  );
  return { code, out, err };
}
