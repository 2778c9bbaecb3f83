// The documentation against the code: every configuration field, environment variable, flag, metric
// and problem type appears in `--help` and in the package README, each list derived from the code
// (the zod schema's shape, the settings table, commander's options, the metrics registry, the
// problem table), so that a field, variable, flag or metric added without documentation fails here.
import { readFileSync } from "node:fs";
import type { Command } from "commander";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { gatewayProgram } from "./cli-program.js";
import { configFields, configSchema } from "./config.js";
import { GatewayMetrics } from "./ops/metrics.js";
import { PROBLEM_TYPES } from "./problems/kinds.js";
import { CONFIG_VARIABLE, SETTINGS } from "./settings.js";
import { STORES } from "./stores/registry.js";

const README = readFileSync(new URL("../README.md", import.meta.url), "utf8");

const program = gatewayProgram({ serve: () => undefined, sweep: () => undefined });
const sweepCommand = program.commands.find((c) => c.name() === "sweep") as Command;

/** What `--help` prints, the text added after the options included (helpInformation() leaves it out). */
function helpOf(command: Command): string {
  let out = "";
  command.configureOutput({ writeOut: (text) => (out += text), getOutHelpWidth: () => 80 });
  command.outputHelp();
  return out;
}
const HELP = helpOf(program);
const SWEEP_HELP = helpOf(sweepCommand);

const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
/** `name` as a whole word: `s3.prefix` is not found inside `s3.prefixes`, nor `host` inside `admin.host`. */
const word = (name: string): RegExp => new RegExp(`(?<![\\w.-])${escape(name)}(?![\\w.[-])`);
/** `name` in backticks, as the README writes every field, variable, flag and metric. */
const quoted = (name: string): string => `\`${name}\``;

/**
 * The schema's fields, walked here on their own (not with config.ts's configFields, which --help is
 * made of): an object's fields dotted, an array of objects' fields as `name[].field`.
 */
function fields(schema: z.ZodType, path: string): string[] {
  if (schema instanceof z.ZodOptional || schema instanceof z.ZodDefault || schema instanceof z.ZodPrefault)
    return fields(schema.unwrap() as z.ZodType, path);
  if (schema instanceof z.ZodPipe) return fields(schema.in as z.ZodType, path);
  if (schema instanceof z.ZodObject)
    return Object.entries(schema.shape as Record<string, z.ZodType>).flatMap(([name, field]) =>
      fields(field, path === "" ? name : `${path}.${name}`),
    );
  if (schema instanceof z.ZodArray) {
    const items = fields(schema.element as z.ZodType, `${path}[]`).filter((p) => p.startsWith(`${path}[].`));
    return [path, ...items];
  }
  return [path];
}

const FIELDS = fields(configSchema, "");
const VARIABLES = [CONFIG_VARIABLE, ...SETTINGS.flatMap((s) => (s.variable === undefined ? [] : [s.variable]))];
const FLAGS = (command: Command): string[] => command.options.flatMap((o) => [o.long, o.short].filter((f) => f !== undefined));

describe("the configuration is documented", () => {
  it("the schema's fields are the ones config.ts describes, nested ones and array items' included", () => {
    expect(FIELDS).toEqual(
      expect.arrayContaining(["requestTimeoutMs", "keepAliveTimeoutMs", "healthTimeoutMs", "s3.partSize", "s3.inlineLimit"]),
    );
    expect(FIELDS).toEqual(expect.arrayContaining(["apiKeys[].trustedLockClient", "fenceKeys[].secret", "admin.port"]));
    expect(configFields().map((f) => f.path)).toEqual(FIELDS);
    const undescribed = configFields().filter((f) => f.description.trim() === "");
    expect(undescribed.map((f) => f.path)).toEqual([]);
    // The table names only fields that exist.
    expect(SETTINGS.map((s) => s.path).filter((p) => !FIELDS.includes(p))).toEqual([]);
  });

  it("every field appears in --help and in the README", () => {
    expect(
      FIELDS.filter((f) => !word(f).test(HELP)),
      "in --help",
    ).toEqual([]);
    expect(
      FIELDS.filter((f) => !README.includes(quoted(f))),
      "in the README",
    ).toEqual([]);
  });

  it("every environment variable appears in --help and in the README, and the README names no other", () => {
    expect(VARIABLES).toContain("FENCED_GATEWAY_FENCE_KEYS");
    const envOptions = [...program.options, ...sweepCommand.options].flatMap((o) => (o.envVar === undefined ? [] : [o.envVar]));
    expect(envOptions.filter((v) => !VARIABLES.includes(v))).toEqual([]);
    expect(
      VARIABLES.filter((v) => !word(v).test(HELP)),
      "in --help",
    ).toEqual([]);
    expect(
      VARIABLES.filter((v) => !README.includes(quoted(v))),
      "in the README",
    ).toEqual([]);
    const named = new Set(README.match(/FENCED_GATEWAY_[A-Z0-9_]+/g));
    expect(
      [...named].filter((v) => !VARIABLES.includes(v)),
      "named in the README, read by nothing",
    ).toEqual([]);
  });

  it("every flag appears in --help (the sweep's in its own) and in the README", () => {
    const flags = FLAGS(program);
    expect(flags).toEqual(expect.arrayContaining(["--config", "-c", "--s3-bucket", "--no-start-checks", "-p"]));
    expect(
      flags.filter((f) => !word(f).test(HELP)),
      "in --help",
    ).toEqual([]);
    // The sweep's own flags, and those of the fields it uses (config.ts, sweepUses): the gateway's, the same names.
    expect(FLAGS(sweepCommand).filter((f) => !flags.includes(f))).toEqual(["--dry-run", "--min-age"]);
    expect(FLAGS(sweepCommand)).toEqual(expect.arrayContaining(["--config", "--s3-bucket", "--postgres", "--store-timeout-ms"]));
    expect(
      FLAGS(sweepCommand).filter((f) => !word(f).test(SWEEP_HELP)),
      "in sweep --help",
    ).toEqual([]);
    expect(word("sweep").test(HELP)).toBe(true);
    expect(
      [...flags, ...FLAGS(sweepCommand)].filter((f) => !README.includes(quoted(f))),
      "in the README",
    ).toEqual([]);
    expect(README).toContain("`fenced-gateway sweep`");
  });
});

describe("the README's operating section", () => {
  it("names only metrics the gateway has, and every one of its own", async () => {
    const metricNames = async (defaultMetrics: boolean): Promise<string[]> => {
      const metrics = new GatewayMetrics({ defaultMetrics });
      // A store's pool is reported under the store's name once a gateway serves it: every store that has one, here.
      for (const registration of STORES)
        if (registration.pool !== undefined) metrics.storePool(registration, { totalCount: 0, idleCount: 0, waitingCount: 0 });
      return (await metrics.registry.getMetricsAsJSON()).map((m) => m.name);
    };
    const names = new Set(await metricNames(true));
    const own = await metricNames(false);
    expect(own.length).toBeGreaterThan(5);
    // A histogram's series carry _bucket, _sum and _count after its name.
    const mentioned = new Set([...README.matchAll(/fenced_gateway_[a-z0-9_]+/g)].map((m) => m[0].replace(/_(bucket|sum|count)$/, "")));
    // The README's short forms (`writes_rejected_total{…}`) stand for the prefixed names.
    for (const m of README.matchAll(/`([a-z0-9_]+_(?:total|seconds|bytes))[{`]/g))
      mentioned.add(`fenced_gateway_${(m[1] ?? "").replace(/^fenced_gateway_/, "")}`);
    expect(
      [...mentioned].filter((n) => !names.has(n)),
      "named in the README, not in /metrics",
    ).toEqual([]);
    expect(
      own.filter((n) => !README.includes(quoted(n)) && !README.includes(`\`${n}{`)),
      "not in the README",
    ).toEqual([]);
  });

  it("says what every problem type means to the person on call", () => {
    const types = Object.values(PROBLEM_TYPES).map((t) => t.type);
    expect(types.filter((t) => !README.includes(quoted(t)))).toEqual([]);
    const named = new Set(README.match(/\/problems\/[a-z-]+/g));
    expect([...named].filter((t) => !types.includes(t as (typeof types)[number]))).toEqual([]);
  });
});
