import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { ConfigurationError } from "./config-issues.js";
import { loadConfig, loadSweepConfig } from "./config.js";
import { GATEWAY_VERSION, nodeSupported, SUPPORTED_NODE } from "./version.js";

/**
 * The configuration's errors name the fix: what is missing and where it can be given, what a value
 * must be and where it came from (a flag, a variable, the config file by its path), in words rather
 * than zod's, for the gateway and its sweep alike.
 */
const KEYS = JSON.stringify([{ id: "a", key: "k".repeat(16), resources: [""], keys: [""] }]);
const env = { FENCED_GATEWAY_API_KEYS: KEYS };
const noFile = (): string => {
  throw Object.assign(new Error("ENOENT: no such file or directory"), { code: "ENOENT" });
};

/** The ConfigurationError loadConfig throws, or a failure. */
function refusal(load: () => unknown): string {
  try {
    load();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigurationError);
    return (err as Error).message;
  }
  throw new Error("the configuration was accepted");
}

describe("configuration errors", () => {
  it("a missing field is said to be missing, with where to give it", () => {
    expect(refusal(() => loadConfig({}, {}, noFile))).toBe("missing apiKeys: give FENCED_GATEWAY_API_KEYS, or apiKeys in the config file");
    const file = JSON.stringify({ apiKeys: [{ id: "f", key: "f".repeat(16) }] });
    expect(refusal(() => loadConfig({ config: "/etc/fenced/gateway.json" }, {}, () => file))).toBe(
      "missing apiKeys[0].resources (in /etc/fenced/gateway.json); missing apiKeys[0].keys (in /etc/fenced/gateway.json)",
    );
  });

  it("a wrong value says what it must be and where it came from, never the value", () => {
    const line = refusal(() => loadConfig({ port: "http", logLevel: "loud" }, { ...env, FENCED_GATEWAY_MAX_CONNECTIONS: "0" }, noFile));
    expect(line).toContain("port must be a number, not a string (from --port)");
    expect(line).toContain("maxConnections must be more than 0 (from FENCED_GATEWAY_MAX_CONNECTIONS)");
    expect(line).toContain("logLevel must be one of fatal, error, warn, info, debug, trace, silent (from --log-level)");
    expect(line).not.toMatch(/expected|received|Invalid input/);
    const secret = "s".repeat(300);
    const tooLong = JSON.stringify([{ id: "a", key: secret, resources: [""], keys: [], extra: 1 }]);
    const keys = refusal(() => loadConfig({}, { FENCED_GATEWAY_API_KEYS: tooLong }, noFile));
    expect(keys).toContain("apiKeys[0].keys must not be empty (from FENCED_GATEWAY_API_KEYS)");
    expect(keys).toContain("unknown field apiKeys[0].extra (from FENCED_GATEWAY_API_KEYS): the fields of apiKeys[0] are id, key, sha256,");
    expect(keys).not.toContain(secret);
  });

  it("the config file is named in its parse error and in its fields' errors", () => {
    const path = "/etc/fenced/gateway.json";
    expect(refusal(() => loadConfig({ config: path }, {}, () => '{ "apiKeys": [ }'))).toBe(
      `the config file ${path} is not valid JSON (\`jq . ${path}\` shows where)`,
    );
    expect(refusal(() => loadConfig({}, { FENCED_GATEWAY_CONFIG: path }, () => "[]"))).toMatch(
      `the config file ${path} must hold a JSON object`,
    );
    expect(refusal(() => loadConfig({ config: path }, {}, noFile))).toBe(`cannot read the config file ${path} (ENOENT)`);
    const file = JSON.stringify({ apiKeys: JSON.parse(KEYS) as unknown, port: -1, s3: { bucket: "b", buckett: "c" } });
    const line = refusal(() => loadConfig({ config: path }, {}, () => file));
    expect(line).toContain(`port must be at least 0 (from ${path})`);
    expect(line).toContain(`unknown field s3.buckett (from ${path}): the fields of s3 are bucket, endpoint,`);
  });

  it("one store serves each family: PostgreSQL or DynamoDB for records, S3 or Azure Blob for objects", () => {
    expect(refusal(() => loadConfig({ postgres: "postgres://u@db/fenced", dynamodbTable: "fenced" }, env, noFile))).toMatch(
      /one store serves \/v1\/records: give the section of one of postgres and dynamodb, not both/,
    );
    const azure = { ...env, FENCED_GATEWAY_AZURE_BLOB_CONTAINER: "fenced", FENCED_GATEWAY_AZURE_BLOB_CONNECTION_STRING: "AccountName=a" };
    expect(refusal(() => loadConfig({ s3Bucket: "bucket" }, azure, noFile))).toMatch(/one store serves \/v1\/objects/);
    const config = loadConfig({ dynamodbTable: "fenced" }, azure, noFile);
    expect([config.dynamodb?.table, config["azure-blob"]?.container, config.postgres, config.s3]).toEqual([
      "fenced",
      "fenced",
      undefined,
      undefined,
    ]);
  });

  it("the PostgreSQL URL is checked like the lock's: a postgres:// or postgresql:// URL", () => {
    expect(refusal(() => loadConfig({ postgres: "notaurl" }, env, noFile))).toBe(
      "postgres.url: must be a postgres:// or postgresql:// URL, such as postgres://user:password@host:5432/database (from --postgres)",
    );
    expect(refusal(() => loadConfig({}, { ...env, FENCED_GATEWAY_POSTGRES_URL: "db.internal:5432" }, noFile))).toMatch(
      /^postgres\.url: must be a postgres:\/\/ .*\(from FENCED_GATEWAY_POSTGRES_URL\)$/,
    );
    for (const url of ["postgres://u:p@db:5432/fenced", "postgresql://u@/fenced?host=/var/run/postgresql"])
      expect(loadConfig({ postgres: url }, env, noFile).postgres?.url).toBe(url);
    expect(refusal(() => loadConfig({ redis: "http://a:1" }, env, noFile))).toMatch(
      /^redis\.urls\[0\]: must be a redis:\/\/ or rediss:\/\/ URL \(from --redis\)/,
    );
  });

  it("the sweep's configuration is worded alike", () => {
    expect(refusal(() => loadSweepConfig({ storeTimeoutMs: "1" }, {}, noFile))).toBe(
      "storeTimeoutMs must be at least 100 (from --store-timeout-ms)",
    );
  });
});

describe("the supported Node.js versions", () => {
  it("are the package's engines, and a version outside them is told apart (the CLI warns at start)", () => {
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { engines: { node: string } };
    expect(SUPPORTED_NODE).toBe(pkg.engines.node);
    const range = SUPPORTED_NODE ?? "";
    for (const version of ["v22.12.0", "v22.20.1", "v24.0.0", "v24.11.1", "v26.1.0"])
      expect(nodeSupported(version, range), version).toBe(true);
    for (const version of ["v20.20.2", "v22.11.0", "v23.5.0", "v25.0.0", "v18.0.0", "v27.0.0"])
      expect(nodeSupported(version, range), version).toBe(false);
    // A range of another form: no warning rather than a wrong one.
    expect(nodeSupported("v20.0.0", ">=18")).toBe(true);
  });
});

describe("the version", () => {
  it("is the package's, read from its package.json", () => {
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string };
    expect(GATEWAY_VERSION).toBe(pkg.version);
  });

  it("is read the same way from the build (dist/ beside src/, one folder below package.json)", async () => {
    const root = mkdtempSync(join(tmpdir(), "fenced-version-"));
    try {
      mkdirSync(join(root, "dist"));
      writeFileSync(join(root, "package.json"), JSON.stringify({ name: "@fenced/gateway", version: "9.8.7-built" }));
      // The module itself, where the build puts it (the test runner compiles it where it lies).
      writeFileSync(join(root, "dist", "version.ts"), readFileSync(new URL("./version.ts", import.meta.url), "utf8"));
      const built = (await import(pathToFileURL(join(root, "dist", "version.ts")).href)) as { GATEWAY_VERSION: string };
      expect(built.GATEWAY_VERSION).toBe("9.8.7-built");
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
