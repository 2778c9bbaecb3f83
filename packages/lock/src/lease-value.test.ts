import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { newLeaseValue } from "./lease-value.js";

const run = promisify(execFile);

describe("newLeaseValue", () => {
  it("hands out 128-bit hex values that never repeat, across many pool refills", () => {
    const values = Array.from({ length: 10_000 }, () => newLeaseValue());
    for (const v of values) expect(v).toMatch(/^[0-9a-f]{32}$/);
    expect(new Set(values).size).toBe(values.length);
    // No 16-byte window is handed out twice: no value shares a half with another (reused or shifted bytes would).
    expect(new Set(values.map((v) => v.slice(0, 16))).size).toBe(values.length);
    expect(new Set(values.map((v) => v.slice(16))).size).toBe(values.length);
  });
});

/** esbuild, as tsx (a dev dependency) brings it: enough of its API to bundle one entry. */
interface Esbuild {
  buildSync(options: {
    entryPoints: string[];
    bundle: true;
    platform: "node";
    format: "cjs";
    target: string;
    outfile: string;
    logLevel: "error";
  }): unknown;
}

function esbuild(): Esbuild {
  const fromRoot = createRequire(fileURLToPath(new URL("../../../package.json", import.meta.url)));
  return createRequire(fromRoot.resolve("tsx"))("esbuild") as Esbuild;
}

/**
 * An application built into a startup snapshot (`node --build-snapshot`) that drew a lease value
 * while it was being built: the pool and its index are in the snapshot. Every process started from
 * it must still draw its own values, or they would share secrets and holder ids.
 */
const ENTRY = (leaseValue: string): string => `
import { startupSnapshot } from "node:v8";
import { newLeaseValue } from ${JSON.stringify(leaseValue)};

// Drawn while the snapshot is built: the pool is full, and its index is 1, when the heap is captured.
newLeaseValue();
startupSnapshot.setDeserializeMainFunction(() => {
  const drawn = Array.from({ length: 4 }, () => newLeaseValue());
  process.stdout.write(JSON.stringify(drawn) + "\\n");
});
`;

describe("newLeaseValue in processes started from one startup snapshot", () => {
  it("draws different values in each process", { timeout: 60_000 }, async () => {
    const dir = await mkdtemp(join(tmpdir(), "fenced-snapshot-"));
    try {
      const source = join(dir, "entry.ts");
      // --build-snapshot runs one CommonJS script that requires built-in modules only: bundle it.
      const script = join(dir, "entry.cjs");
      const blob = join(dir, "snapshot.blob");
      await writeFile(source, ENTRY(fileURLToPath(new URL("./lease-value.ts", import.meta.url))));
      esbuild().buildSync({
        entryPoints: [source],
        bundle: true,
        platform: "node",
        format: "cjs",
        target: "node20",
        outfile: script,
        logLevel: "error",
      });
      await run(process.execPath, ["--snapshot-blob", blob, "--build-snapshot", script], { cwd: dir });
      const draw = async (): Promise<string[]> =>
        JSON.parse((await run(process.execPath, ["--snapshot-blob", blob], { cwd: dir })).stdout) as string[];
      const [first, second] = await Promise.all([draw(), draw()]);
      for (const v of [...first, ...second]) expect(v).toMatch(/^[0-9a-f]{32}$/);
      expect(new Set([...first, ...second]).size, `${JSON.stringify(first)} vs ${JSON.stringify(second)}`).toBe(8);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
