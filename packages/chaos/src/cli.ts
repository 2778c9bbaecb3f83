#!/usr/bin/env node
import { Command, InvalidArgumentError, Option } from "commander";
import { check, describeEvent } from "./checker.js";
import { BACKENDS, DEFAULT_BACKENDS, MODES, readHistoryFile, VIAS, type Backend, type Mode, type Via } from "./history.js";
import { GATEWAY_BACKENDS, runChaos, type ChaosSummary } from "./suite.js";

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1) throw new InvalidArgumentError("must be a positive integer");
  return n;
}

function nonNegativeInt(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError("must be a non-negative integer");
  return n;
}

const program = new Command()
  .name("fenced-chaos")
  .description(
    "Fault injection with a history checker: workers increment counters under Redlock leases while a seeded nemesis " +
      "pauses workers, pauses/kills Redis nodes, wipes a majority of them, jumps a node's clock, delays packets and resets connections, pauses and kills the store server (azurite: pauses only), skews radosgw's clock " +
      "(with --via gateway, also pauses the gateway process); the checker then counts repeated tokens and looks for lost updates, decreasing tokens and writes of two holders at one token, " +
      "and checks that every call was answered within the deadline plus a margin. Exits non-zero if 'full' shows a violation, 'unfenced' shows none, an answer came late or never, or a process died.",
  )
  .option("--ops <n>", "operations per configuration and backend", positiveInt, 2000)
  .option("--seed <n>", "seed of the fault schedule (same seed, same faults)", nonNegativeInt)
  .addOption(new Option("--config <name>", "configuration to run").choices([...MODES, "all"]).default("all"))
  .addOption(
    new Option("--backend <name>", `store to run against ("both": ${DEFAULT_BACKENDS.join(" and ")}; "all": ${BACKENDS.join(", ")})`)
      .choices([...BACKENDS, "both", "all"])
      .default("both"),
  )
  .addOption(
    new Option(
      "--via <how>",
      "library: workers run the lock and the stores' writers themselves; gateway: they take leases and write over HTTP through a fenced gateway process",
    )
      .choices(VIAS)
      .default("library"),
  )
  .option(
    "--pairs",
    "every operation takes one lease of two resources (drawn at random, in random order: sets overlap and come in both orders) and increments a counter per resource; " +
      "on PostgreSQL both in one transaction under both fences (the checker also looks for pairs that landed by halves), on S3, DynamoDB and Azure Blob (and through a gateway) each under its own resource's fence; --ops counts pairs",
    false,
  )
  .option("--ttl <ms>", "lease TTL in ms", positiveInt, 600)
  .option("--workers <n>", "worker processes", positiveInt, 5)
  .option("--resources <n>", "resources the workers lock (default 2, with --pairs 3)", positiveInt)
  .option(
    "--deadline <ms>",
    "the stores' deadline (timeoutMs) in the workers and the gateway, and the workers' for a lease",
    positiveInt,
    2_000,
  )
  .option("--liveness-margin <ms>", "what liveness allows an answer beyond the deadline", nonNegativeInt, 1_500)
  .option("--no-store-faults", "do not pause or kill the store server")
  .option("--json", "print the summary as JSON, as the last line on stdout", false)
  .option("--out <dir>", "write an SVG plot and the JSON-lines history of every run to this directory")
  .option("--check-history <file>", "only check a history written by --out, and exit non-zero if it has a violation")
  .parse();

const options = program.opts<{
  ops: number;
  seed?: number;
  config: Mode | "all";
  backend: Backend | "both" | "all";
  via: Via;
  pairs: boolean;
  ttl: number;
  workers: number;
  resources?: number;
  deadline: number;
  livenessMargin: number;
  storeFaults: boolean;
  json: boolean;
  out?: string;
  checkHistory?: string;
}>();

if (options.checkHistory !== undefined) {
  const result = check(readHistoryFile(options.checkHistory), { deadlineMs: options.deadline, marginMs: options.livenessMargin });
  const { first: _first, firstViolation, victims: _victims, ...counts } = result;
  const sub = firstViolation?.subHistory.map(describeEvent) ?? [];
  process.stdout.write(
    `${JSON.stringify({ ...counts, firstViolation: firstViolation === undefined ? null : { kind: firstViolation.kind, message: firstViolation.message, subHistory: sub } })}\n`,
  );
  process.exit(result.valid && result.liveness.late === 0 && result.liveness.unanswered === 0 ? 0 : 1);
}
const seed = options.seed ?? Math.floor(Math.random() * 2 ** 31);
const configs = options.config === "all" ? MODES : [options.config];
const backends = options.backend === "both" ? DEFAULT_BACKENDS : options.backend === "all" ? BACKENDS : [options.backend];

if (options.pairs && options.resources === 1) program.error("--pairs needs at least 2 resources");
const gatewayless = backends.filter((b) => !GATEWAY_BACKENDS.includes(b));
if (options.via === "gateway" && gatewayless.length > 0)
  program.error(`--via gateway runs on ${GATEWAY_BACKENDS.join(" and ")} only, not ${gatewayless.join(", ")}: pick one with --backend`);

// Progress goes to stderr so that stdout stays the summary alone under --json.
const log = (line: string): void => void process.stderr.write(`${line}\n`);
log(
  `chaos: seed ${seed}, ${options.ops} ${options.pairs ? "pair operations" : "operations"} per configuration, configurations ${configs.join(", ")}, backends ${backends.join(", ")}, via ${options.via}`,
);

const summary = await runChaos({
  ops: options.ops,
  seed,
  configs,
  backends,
  via: options.via,
  pairs: options.pairs,
  ttlMs: options.ttl,
  workers: options.workers,
  ...(options.resources === undefined ? {} : { resources: options.resources }),
  deadlineMs: options.deadline,
  livenessMarginMs: options.livenessMargin,
  storeFaults: options.storeFaults,
  log,
  ...(options.out === undefined ? {} : { out: options.out }),
});

if (options.json) {
  process.stdout.write(`${JSON.stringify(summary)}\n`);
} else {
  process.stdout.write(report(summary));
}
process.exit(summary.pass ? 0 : 1);

function report(s: ChaosSummary): string {
  const list = (counts: Readonly<Record<string, number>>): string =>
    Object.entries(counts)
      .map(([k, v]) => `${k} ${v}`)
      .join(", ");
  const lines: string[] = [
    `seed ${s.seed}: ${s.ops} operations${s.pairs ? " (halves of pairs: one per resource)" : ""}, TTL ${s.ttlMs} ms, ${s.workers} workers, ${s.resources} resources, ${s.redisNodes} Redis nodes, via ${s.via}, ` +
      `store deadline ${s.deadlineMs} ms, liveness bound ${s.deadlineMs + s.livenessMarginMs} ms, store faults ${s.storeFaults ? "on" : "off"}`,
    `faults: ${list(s.faults)}`,
  ];
  for (const [backend, byMode] of Object.entries(s.runs)) {
    for (const [mode, run] of Object.entries(byMode ?? {})) {
      const o = run.byOutcome;
      const l = run.liveness;
      lines.push(
        `\n${backend}/${mode}: ${run.ops} ops in ${(run.durationMs / 1000).toFixed(1)} s`,
        `  outcomes: ok ${o.ok}, refused ${o.refused}, unavailable ${o.unavailable}, ` +
          `outcome unknown ${o["outcome-unknown"]} (landed ${run.outcomeUnknown.landed}, not seen ${run.outcomeUnknown.notSeen}), error ${o.error}`,
        `  errors: ${list(run.errors) || "none"}`,
        `  faults: ${list(Object.fromEntries(Object.entries(run.faults).filter(([, n]) => n > 0)))}; missed ${run.faultsMissed}`,
        `  violations: ${list(run.violations)}; repeated tokens ${run.repeatedTokens}, token regressions ${run.tokenRegressions}; failed but applied ${run.failedButApplied}`,
        ...(run.pairs === undefined
          ? []
          : [
              `  pairs: ${run.pairs.ops} pair operations, ${run.pairs.atomic} written in one transaction, atomicity judged on ${run.pairs.judged} (a half seen landed)`,
            ]),
        `  liveness: ${l.calls} calls, late ${l.late}, unanswered ${l.unanswered}; slowest answer ${l.slowestMs} ms: ${l.slowest ?? "-"}`,
        `  slowest by call (ms): ${list(l.slowestByStep)}`,
        `  process deaths: ${run.deaths.length === 0 ? "none" : run.deaths.join("; ")}`,
      );
      if (run.firstViolation !== undefined) {
        lines.push(`  first violation (${run.firstViolation.kind}): ${run.firstViolation.message}`);
        for (const event of run.firstViolation.subHistory) lines.push(`    ${event}`);
      }
    }
  }
  lines.push(s.pass ? "\nPASS" : `\nFAIL\n${s.failures.map((f) => `  ${f}`).join("\n")}`);
  return `${lines.join("\n")}\n`;
}
