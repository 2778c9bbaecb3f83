// The README's first example ("A first fenced write") run as a user runs it: its text pasted into a
// file of their project (the tarballs installed, with their own ioredis, pg and TypeScript), the
// example's three Redis nodes replaced by this test's, compiled with their tsc, and run with node on a
// database created for it, empty. Then read back with the workspace's packages: the record it wrote,
// and its lease released (a new lease of the resource is granted at once, with a higher token).
import { LockNotAcquiredError, Redlock } from "@fenced/lock";
import { FencedPostgres } from "@fenced/store/postgres";
import { Redis } from "ioredis";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import pg from "pg";
import { cleanEnv } from "./consumer-project.js";
import { run, type Ran } from "./exec.js";
import type { GatewayBackends } from "./gateway-bin.js";
import { firstBlockAfter } from "./readme.js";
import { ROOT } from "./tarballs.js";

export const FIRST_EXAMPLE_HEADING = "## A first fenced write";
/** The resource and key the example writes. */
const KEY = "orders/42";
/** The example's placeholder nodes: redis://a:6379, redis://b:6379, … */
const EXAMPLE_NODES = /redis:\/\/[a-z]:6379/g;

export interface FirstExampleRun {
  readonly compiled: Ran;
  /** Absent when it did not compile. */
  readonly ran?: Ran;
  readonly stored?: { readonly value: unknown; readonly token: bigint } | undefined;
  /** The token of a lease acquired right after the example exited; undefined if the resource was still held. */
  readonly nextToken?: bigint | undefined;
}

/** The example with this test's nodes in place of its own, one for one. */
function withNodes(code: string, urls: readonly string[]): string {
  const named = code.match(EXAMPLE_NODES) ?? [];
  if (named.length !== urls.length) throw new Error(`the first example names ${named.length} Redis nodes, this test starts ${urls.length}`);
  let next = 0;
  return code.replace(EXAMPLE_NODES, () => urls[next++] ?? "");
}

/** A database of its own on the test's server, created empty: the example's "fresh database". */
async function freshDatabase(url: string, name: string): Promise<string> {
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const fresh = new URL(url);
  fresh.pathname = `/${name}`;
  return fresh.toString();
}

export async function runFirstExample(project: string, backends: GatewayBackends): Promise<FirstExampleRun> {
  const block = firstBlockAfter(ROOT, "README.md", FIRST_EXAMPLE_HEADING);
  await writeFile(join(project, "first-write.mts"), `${withNodes(block.code, backends.redisUrls)}\n`);
  const tsc = join(project, "node_modules", "typescript", "bin", "tsc");
  // The settings of a careful user's tsconfig (consumer-project.ts's STRICT); their libraries were
  // checked by the consumer's checks already.
  const options = ["--strict", "--exactOptionalPropertyTypes", "--noUncheckedIndexedAccess", "--target", "es2022", "--module", "nodenext"];
  const compiled = await run(
    process.execPath,
    [tsc, "first-write.mts", ...options, "--types", "node", "--skipLibCheck", "--outDir", "out-first", "--pretty", "false"],
    { cwd: project, env: cleanEnv(), timeoutMs: 120_000 },
  );
  if (compiled.code !== 0) return { compiled };

  const databaseUrl = await freshDatabase(backends.postgresUrl, `first_write_${process.pid}`);
  // A program that leaves a connection open never exits: the timeout kills it (code null).
  const ran = await run(process.execPath, [join("out-first", "first-write.mjs")], {
    cwd: project,
    env: cleanEnv({ DATABASE_URL: databaseUrl }),
    timeoutMs: 30_000,
  });

  const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  const clients = backends.redisUrls.map((url) => new Redis(url).on("error", () => undefined));
  try {
    const record = await new FencedPostgres(pool).get(KEY);
    let nextToken: bigint | undefined;
    try {
      const lease = await new Redlock(clients, { retryCount: 0 }).acquire(KEY, 1_000);
      nextToken = lease.token;
      await lease.release();
    } catch (err) {
      if (!(err instanceof LockNotAcquiredError)) throw err;
    }
    return { compiled, ran, stored: record && { value: record.value, token: record.token }, nextToken };
  } finally {
    await pool.end();
    for (const client of clients) client.disconnect();
  }
}
