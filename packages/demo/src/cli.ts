#!/usr/bin/env node
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { Command, Option } from "commander";
import { BACKEND_TITLES, BACKENDS, type BackendName } from "./backends.js";
import { renderHtml, type Picture } from "./html.js";
import { killAllClientProcesses } from "./paused-client.js";
import { jsonReporter, terminalReporter, type ResultLine, type RunSummary } from "./report.js";
import { SCENARIO_LIST } from "./scenarios/index.js";
import { startDemoServers, type DemoServers } from "./servers.js";
import { renderSvg } from "./svg.js";

interface Options {
  scenario: string;
  backend: string;
  json: boolean;
  out?: string;
  redisUrls?: string;
  databaseUrl?: string;
  s3Endpoint?: string;
}

const program = new Command()
  .name("fenced-demo")
  .description(
    'Replays the failures from "How to do distributed locking" against real Redis, PostgreSQL, S3, DynamoDB and Azure Blob servers, unfenced and fenced.',
  )
  .addOption(new Option("--scenario <name>", "scenario to run").choices(["gc-pause", "clock-jump", "both-paused", "all"]).default("all"))
  .addOption(
    new Option("--backend <name>", "storage to write to (both: S3 and PostgreSQL; all: DynamoDB and Azure Blob too)")
      .choices(["s3", "postgres", "dynamodb", "azure-blob", "both", "all"])
      .default("both"),
  )
  .option("--json", "one JSON object per line on stdout (progress goes to stderr)", false)
  .option("--out <dir>", "where the pictures go (default: demo-output/ at the repository root)")
  .option("--redis-urls <urls>", "use these 5 Redis servers (comma-separated) instead of starting them; same as REDIS_URLS")
  .option("--database-url <url>", "use this PostgreSQL instead of starting one; same as DATABASE_URL")
  .option(
    "--s3-endpoint <url>",
    "use this S3 endpoint instead of starting one (S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY from the environment); same as S3_ENDPOINT",
  )
  .parse();

const options = program.opts<Options>();
// The project supports Node 20 (see engines); the SDK's notice about its own future releases would
// only interrupt the narration. Set before any S3 client exists; the client processes inherit it.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
if (options.redisUrls !== undefined) process.env.REDIS_URLS = options.redisUrls;
if (options.databaseUrl !== undefined) process.env.DATABASE_URL = options.databaseUrl;
if (options.s3Endpoint !== undefined) process.env.S3_ENDPOINT = options.s3Endpoint;

const reporter = options.json ? jsonReporter(process.stdout, process.stderr) : terminalReporter(process.stdout);
const scenarios = SCENARIO_LIST.filter((s) => options.scenario === "all" || s.name === options.scenario);
const backends: BackendName[] =
  options.backend === "all"
    ? [...BACKENDS]
    : options.backend === "both"
      ? BACKENDS.filter((b) => b === "s3" || b === "postgres")
      : BACKENDS.filter((b) => b === options.backend);
const outDir = resolve(options.out ?? join(repoRoot(), "demo-output"));
const nonce = randomBytes(4).toString("hex");
const started = performance.now();

let servers: DemoServers | undefined;
let interrupted = false;
const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/**
 * Ctrl-C tears everything down in order: the stopped client processes first (a stopped process
 * would never exit on its own), then the servers and their temporary directories. A second signal
 * exits at once; the server harness's exit hook still kills whatever is left.
 */
function onSignal(signal: NodeJS.Signals): void {
  abort(`${signal}: tearing down the servers…`, signal === "SIGINT" ? 130 : 143);
}

function abort(why: string, exitCode: number): void {
  if (interrupted) process.exit(exitCode);
  interrupted = true;
  killAllClientProcesses();
  process.stderr.write(`\n${why}\n`);
  const fallback = setTimeout(() => process.exit(exitCode), 10_000);
  void (servers?.stop() ?? Promise.resolve()).finally(() => {
    clearTimeout(fallback);
    process.exit(exitCode);
  });
}
for (const signal of SIGNALS) process.on(signal, onSignal);
process.on("exit", killAllClientProcesses);
// A reader that goes away (`pnpm -s demo --json | head`) must not leave the servers behind.
process.stdout.on("error", (err: NodeJS.ErrnoException) => {
  // Every later write fails the same way; only the first one starts the teardown.
  if (interrupted) return;
  if (err.code === "EPIPE") abort("stdout closed: tearing down the servers…", 141);
  else throw err;
});

let code = 1;
try {
  code = await main();
} catch (err) {
  process.stderr.write(`demo failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
} finally {
  killAllClientProcesses();
  await servers?.stop();
}
// Exit only once stdout has been handed to the OS: a pipe reader must get every JSON line.
process.stdout.write("", () => process.exit(code));

async function main(): Promise<number> {
  reporter.info(`fenced demo: ${scenarios.map((s) => s.name).join(", ")} on ${backends.join(" and ")}`);
  servers = await startDemoServers(
    { clock: scenarios.some((s) => s.needsClock), plain: scenarios.some((s) => !s.needsClock), backends },
    nonce,
    (m) => reporter.progress(m),
  );
  takeOverSignals();
  reporter.info(`Servers used:\n${servers.used.map((u) => `  - ${u}`).join("\n")}`);
  await mkdir(outDir, { recursive: true });

  const pictures: Picture[] = [];
  const results: ResultLine[] = [];
  for (const scenario of scenarios) {
    const lock = scenario.needsClock ? servers.clockLock : servers.lock;
    if (lock === undefined) throw new Error(`no lock nodes were started for ${scenario.name}`);
    for (const backendName of backends) {
      const backend = servers.backends.get(backendName);
      if (backend === undefined) throw new Error(`no ${backendName} server was started`);
      const runs: RunSummary[] = [];
      for (const mode of scenario.modes) {
        if (interrupted) return 130;
        const id = { scenario: scenario.name, backend: backendName, mode };
        reporter.runStart(id, `${scenario.name} · ${BACKEND_TITLES[backendName]} · ${mode}`);
        const env = {
          backendName,
          backend,
          lock,
          nonce,
          onEvent: (e: Parameters<typeof reporter.event>[0]) => reporter.event(e),
          progress: (m: string) => reporter.progress(m),
        };
        try {
          const record = await scenario.run(env, mode);
          const file = `${scenario.name}-${backendName}-${mode}.svg`;
          await writeFile(join(outDir, file), renderSvg(record));
          pictures.push({ run: record, file });
          reporter.runEnd(record, join(outDir, file));
          const v = record.verdict;
          runs.push({ mode, expected: v.expected, observed: v.observed, ok: v.ok, summary: v.summary });
        } catch (err) {
          if (interrupted) return 130;
          reporter.runFailed(id, err);
          runs.push({ mode, expected: "-", observed: "error", ok: false, summary: err instanceof Error ? err.message : String(err) });
        }
      }
      results.push({ scenario: scenario.name, backend: backendName, ok: runs.every((r) => r.ok), runs, servers: servers.used });
    }
  }

  const ok = results.every((r) => r.ok);
  const html = join(outDir, "index.html");
  await writeFile(html, renderHtml(scenarios, pictures, { servers: servers.used, when: new Date(), ok }));
  reporter.results(results, (performance.now() - started) / 1000, html);
  return ok ? 0 : 1;
}

/**
 * The server harness answers a signal by killing its processes and re-raising it at once, which
 * leaves temporary directories behind; from here on the demo's own handler does the whole teardown.
 */
function takeOverSignals(): void {
  for (const signal of SIGNALS) {
    for (const listener of process.listeners(signal)) if (listener !== onSignal) process.removeListener(signal, listener);
  }
}

/** The directory holding pnpm-workspace.yaml above this file, else the working directory. */
function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, "pnpm-workspace.yaml"))) return dir;
    const parent = dirname(dir);
    if (parent === dir) return process.cwd();
    dir = parent;
  }
}
