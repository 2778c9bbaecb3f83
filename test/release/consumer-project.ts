import { copyFile, mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { run, runOk, type Ran } from "./exec.js";
import { ROOT, type Tarball } from "./tarballs.js";

/** What a user installs beside the packages: their own clients (ioredis: the registry's latest major; iovalkey; node-redis; Valkey GLIDE; pg; the AWS SDK's S3 and DynamoDB; Azure's Blob SDK) and compiler. */
const USER_PACKAGES = [
  "ioredis@latest",
  "iovalkey@latest",
  "redis@latest",
  "@valkey/valkey-glide@latest",
  "pg@^8",
  "@types/pg@^8",
  "@aws-sdk/client-s3@^3",
  "@aws-sdk/client-dynamodb@^3",
  "@azure/storage-blob@^12",
  "typescript@latest",
  "@types/node@^22",
];

/** npm's cache for these installs, kept between runs (ignored by git): later runs resolve offline-first. */
const NPM_CACHE = join(ROOT, ".cache", "npm");

/** The environment without the npm_* variables a `pnpm test` leaves: npm would read them as its own config. */
export function cleanEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!/^npm_/i.test(key)) env[key] = value;
  return { ...env, ...extra };
}

/** A user's project outside the workspace: only the tarballs and the registry, no workspace links. */
export async function installConsumer(dir: string, tarballs: readonly Tarball[]): Promise<Ran> {
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "package.json"), `${JSON.stringify({ name: "fenced-consumer", version: "1.0.0", private: true }, null, 2)}\n`);
  return npmInstall(dir, [...tarballs.map((t) => t.file), ...USER_PACKAGES]);
}

/** `npm install` of these specs in a user's project: npm's own cache (NPM_CACHE), offline first, quiet. */
export function npmInstall(dir: string, specs: readonly string[]): Promise<Ran> {
  const args = ["install", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error", "--cache", NPM_CACHE, ...specs];
  return runOk("npm", args, { cwd: dir, env: cleanEnv(), timeoutMs: 240_000 });
}

/** The compiler settings a careful user has: strict, exactOptionalPropertyTypes, and every .d.ts checked. */
export const STRICT = {
  strict: true,
  exactOptionalPropertyTypes: true,
  noUncheckedIndexedAccess: true,
  target: "es2022",
  lib: ["es2023"],
  types: ["node"],
  esModuleInterop: true,
};

export interface Check {
  readonly name: string;
  readonly file: "consumer.mts" | "consumer.cts";
  readonly compilerOptions: Record<string, unknown>;
}

/**
 * ES module consumers under Node's resolution and a bundler's; a CommonJS consumer under `node20`,
 * TypeScript's model of Node ≥ 20.19, where require() loads an ES module (under `node16` TypeScript
 * refuses that import, as Node 16 did). The node16 and node20 checks emit what the runs execute.
 */
export const CHECKS: readonly Check[] = [
  { name: "node16", file: "consumer.mts", compilerOptions: { module: "node16", moduleResolution: "node16", outDir: "out-esm" } },
  { name: "bundler", file: "consumer.mts", compilerOptions: { module: "preserve", moduleResolution: "bundler", noEmit: true } },
  { name: "node20-commonjs", file: "consumer.cts", compilerOptions: { module: "node20", moduleResolution: "node16", outDir: "out-cjs" } },
];

/** Copies the consumer in twice (as an ES module and as CommonJS) and writes one tsconfig per check. */
export async function writeChecks(dir: string, consumerSource: string): Promise<void> {
  await copyFile(consumerSource, join(dir, "consumer.mts"));
  await copyFile(consumerSource, join(dir, "consumer.cts"));
  for (const check of CHECKS) {
    const config = { compilerOptions: { ...STRICT, ...check.compilerOptions }, files: [check.file] };
    await writeFile(join(dir, `tsconfig.${check.name}.json`), `${JSON.stringify(config, null, 2)}\n`);
  }
}

export interface CheckResult {
  readonly check: string;
  readonly compiler: string;
  readonly skipLibCheck: boolean;
  readonly errors: readonly string[];
  readonly ms: number;
}

/** Runs one check with a given tsc; skipLibCheck false also checks every declaration file the consumer loads. */
export async function typeCheck(dir: string, check: Check, tsc: string, skipLibCheck: boolean, noEmit = false): Promise<CheckResult> {
  const args = [tsc, "-p", `tsconfig.${check.name}.json`, "--pretty", "false", "--skipLibCheck", String(skipLibCheck)];
  if (noEmit) args.push("--noEmit");
  const ran = await run(process.execPath, args, { cwd: dir, env: cleanEnv(), timeoutMs: 240_000 });
  const version = (await runOk(process.execPath, [tsc, "--version"], { cwd: dir })).stdout.trim();
  const errors = ran.stdout.split("\n").filter((line) => /error TS\d+/.test(line));
  if (ran.code !== 0 && errors.length === 0) errors.push(`tsc exited ${ran.code}: ${ran.stdout}${ran.stderr}`);
  return { check: check.name, compiler: version, skipLibCheck, errors, ms: ran.ms };
}
