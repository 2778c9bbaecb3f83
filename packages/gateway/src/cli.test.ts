import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { runCli } from "./cli-test-support.js";

/**
 * The `fenced-gateway` binary's own answers, as a child process: its version, the sweep's help, and
 * a configuration refused before any backend is called (exit 2, one line naming the field and the fix).
 */
const PACKAGE = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string };
const API_KEYS = JSON.stringify([{ id: "a", key: "k".repeat(16), resources: [""], keys: [""] }]);

describe("fenced-gateway", () => {
  it("--version (and -V) prints the package's version", async () => {
    for (const flag of ["--version", "-V"]) {
      const run = await runCli([flag]);
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout).toBe(`${PACKAGE.version}\n`);
    }
  });

  it("sweep --help lists only the flags the sweep uses", async () => {
    const run = await runCli(["sweep", "--help"]);
    expect(run.code, run.stderr).toBe(0);
    const flags = [...run.stdout.matchAll(/^ {2}(?:-\w, )?(--[a-z0-9-]+)/gm)].map((m) => m[1]);
    expect(flags.sort()).toEqual(
      [
        "--config",
        "--dry-run",
        "--help",
        "--min-age",
        "--postgres",
        "--s3-bucket",
        "--s3-endpoint",
        "--s3-prefix",
        "--s3-region",
        "--store-timeout-ms",
      ].sort(),
    );
    // The serving flags are not the sweep's: given after `sweep`, they are refused.
    expect(run.stdout).not.toMatch(/--port|--admin-port|--redis|--no-start-checks|FENCED_GATEWAY_API_KEYS/);
    const port = await runCli(["sweep", "--port", "1"]);
    expect(port.code).not.toBe(0);
    expect(port.stderr).toMatch(/unknown option '--port'/);
  });

  it("--postgres notaurl is refused as a configuration (exit 2, one line), never looked up as a host", async () => {
    const run = await runCli(["--port", "0", "--postgres", "notaurl"], { FENCED_GATEWAY_API_KEYS: API_KEYS });
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toBe(
      "fenced-gateway: invalid configuration: postgres.url: must be a postgres:// or postgresql:// URL, such as postgres://user:password@host:5432/database (from --postgres)\n",
    );
  });

  it("a missing API key list is said to be missing, with where to give it", async () => {
    const run = await runCli(["--port", "0"], { FENCED_GATEWAY_API_KEYS: "" });
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toBe(
      "fenced-gateway: invalid configuration: missing apiKeys: give FENCED_GATEWAY_API_KEYS, or apiKeys in the config file\n",
    );
  });
});
