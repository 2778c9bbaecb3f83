import { Command, Option } from "commander";
import { configFields, sweepUses } from "./config.js";
import { CONFIG_VARIABLE, SETTINGS, flagNames, type ConfigFlags } from "./settings.js";
import { GATEWAY_VERSION } from "./version.js";

/** The sweep command's own flags, as commander hands them over. */
interface SweepFlags {
  readonly dryRun?: boolean;
  readonly minAge?: string;
}

/** What each command does, given its flags (cli.ts). */
export interface Commands {
  serve(flags: ConfigFlags): Promise<void> | void;
  sweep(flags: ConfigFlags, options: SweepFlags): Promise<void> | void;
}

/** `--min-age` unless given: a day. */
export const DEFAULT_MIN_AGE = "1d";

/**
 * The `fenced-gateway` command line: the gateway's flags (settings.ts), each named in `--help` with
 * its variable and configuration field, the fields only a file or the environment can give, and the
 * `sweep` command, which reads the same configuration and takes, after its name, the flags of the
 * fields it uses (config.ts, sweepUses): its `--help` lists only those. The gateway's flags go before
 * `sweep` (positional options), where they are read too.
 */
export function gatewayProgram(commands: Commands): Command {
  const described = new Map(configFields().map((f) => [f.path, f.description]));
  const program = new Command("fenced-gateway")
    .description("HTTP gateway to fenced Postgres records, fenced S3 objects and Redlock leases with fencing tokens")
    .version(GATEWAY_VERSION, "-V, --version", "print the version (the @fenced/gateway package's) and exit")
    .enablePositionalOptions();
  addSettings(program, described, () => true);
  program
    .option(
      "--otlp",
      "export traces over OTLP/HTTP, configured by the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf or http/json, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER …) [also on with OTEL_TRACES_EXPORTER=otlp; off with OTEL_SDK_DISABLED=true]",
    )
    .addHelpText("after", `\n${notFlags(described, () => true)}\n\n${EXIT_CODES}`)
    .action(() => commands.serve(program.opts<ConfigFlags>()));

  const sweep = program
    .command("sweep")
    .description(
      "delete the S3 data objects no manifest names or can come to name (orphans of writers that died or lost an answer), " +
        "and abort their incomplete multipart uploads; " +
        "with the gateway's configuration (the same file, variables and flags)",
    )
    .option("--dry-run", "report what would be deleted, delete nothing")
    .option("--min-age <duration>", `keep objects younger than this: milliseconds, or a number with ms, s, m, h or d`, DEFAULT_MIN_AGE);
  addSettings(sweep, described, sweepUses);
  sweep.addHelpText("after", `\n${notFlags(described, sweepUses)}\n\n${SWEEP_HELP}`).action((options: SweepFlags & ConfigFlags) => {
    const { dryRun, minAge, ...flags } = options;
    return commands.sweep(
      { ...program.opts<ConfigFlags>(), ...flags },
      { ...(dryRun && { dryRun }), ...(minAge !== undefined && { minAge }) },
    );
  });
  return program;
}

/** `--config` and the flag of every setting `uses` names, each described with its variable and field. */
function addSettings(command: Command, described: ReadonlyMap<string, string>, uses: (path: string) => boolean): void {
  command.addOption(new Option("-c, --config <file>", "JSON config file (file < environment < flags)").env(CONFIG_VARIABLE));
  for (const setting of SETTINGS) {
    if (setting.flag === undefined || !uses(setting.path)) continue;
    const what = described.get(setting.path) ?? "";
    const negated = flagNames(setting.flag).long.startsWith("--no-");
    const names = setting.variable === undefined ? setting.path : `${setting.variable}, ${setting.path}`;
    command.option(setting.flag, `${negated ? `turns off ${setting.path}: ` : ""}${what} [${names}]`);
  }
}

const EXIT_CODES =
  "Exit codes: 2 for a configuration, a backend or a listen address that refuses the start (one line on stderr), 1 for any other failure.";

const SWEEP_HELP = [
  "Progress goes to stderr, the final report (JSON) to stdout. PostgreSQL has nothing to sweep: a record and its fence row",
  "change only inside one transaction, and tombstones and fence rows are kept by design; the report says so.",
  "Exit codes: 0 when the sweep completed; 2 for an invalid configuration or --min-age, or no S3 bucket configured;",
  "1 when a backend failed the sweep (one line on stderr; run it again: what it deleted stays deleted, what it left is found again).",
].join("\n");

/** How a nested field of the file goes in it, shown with the first one listed (not an array's item): `; nested fields as "section": { "field": … }`. */
function nested(fields: readonly [string, string][]): string {
  const path = fields.map(([p]) => p).find((p) => /^[A-Za-z]+\.[A-Za-z]+$/.test(p));
  const [section, field] = path?.split(".") ?? [];
  return section === undefined || field === undefined ? "" : `; nested fields as "${section}": { "${field}": … }`;
}

/** The settings `uses` names that no flag gives: secrets (variables and the file only) and the fields only the file gives. */
function notFlags(described: ReadonlyMap<string, string>, uses: (path: string) => boolean): string {
  const column = (rows: [string, string][]): string => {
    const width = Math.max(...rows.map(([name]) => name.length)) + 2;
    return rows.map(([name, text]) => `  ${name.padEnd(width)}${text}`).join("\n");
  };
  const withVariable = SETTINGS.filter((s) => s.flag === undefined && s.variable !== undefined && uses(s.path));
  const given = new Set(SETTINGS.map((s) => s.path));
  const fileOnly = [...described].filter(([path]) => !given.has(path) && uses(path));
  return [
    "Only in the environment or the config file (a command line is visible to every user of the machine):",
    column(withVariable.map((s) => [s.variable as string, `${s.path}: ${described.get(s.path) ?? ""}`])),
    "",
    `Only in the config file (--config or ${CONFIG_VARIABLE}${nested(fileOnly)}):`,
    column(fileOnly),
  ].join("\n");
}
