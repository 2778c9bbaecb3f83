// The files operators install beside the gateway (packages/gateway/ops): the Prometheus alert rules
// and their unit test, the Grafana dashboard, the systemd unit. Checked with the operators' own tools
// (promtool from Debian's prometheus package, systemd-analyze), and against a running gateway: every
// metric they name is one its /metrics declares, every `reason` one it counts.
import { S3Client } from "@aws-sdk/client-s3";
import { createGateway, PROBLEM_TYPES, serve, type Serving } from "@fenced/gateway";
import { Redis } from "ioredis";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { run } from "./exec.js";
import { exportedNames, labelValues, metricNames, ruleExpressions, substituteGrafanaVariables } from "./promql.js";
import { ROOT } from "./tarballs.js";

const OPS = join(ROOT, "packages", "gateway", "ops");
/** Series Prometheus makes itself for every scrape target, which no exporter declares. */
const PROMETHEUS_OWN = new Set(["up", "scrape_duration_seconds", "scrape_samples_scraped"]);
/** writes_rejected_total's reasons besides the problem slugs: outcomes.ts' drained, aborted and error. */
const REASONS = new Set([...Object.values(PROBLEM_TYPES).map((p) => p.reason), "drained", "aborted", "error"]);

function which(tool: string): string | undefined {
  try {
    return execFileSync("sh", ["-c", `command -v ${tool}`], { encoding: "utf8" }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** promtool, or an error that says how to get it: these checks never pass by skipping. */
function promtool(): string {
  const path = which("promtool");
  if (path === undefined)
    throw new Error(
      "promtool is not installed: it comes with Debian's prometheus package (`sudo apt-get install -y prometheus`, or run scripts/bootstrap.sh)",
    );
  return path;
}

interface Dashboard {
  readonly uid: string;
  readonly panels: readonly { id: number; type: string; title: string; targets?: { expr: string }[] }[];
  readonly templating: { list: { name: string; query?: string | { query: string } }[] };
}

let rulesText: string;
let dashboard: Dashboard;
/** Every expression the operators' files hold, each with where it is. */
let expressions: { where: string; expr: string }[];

beforeAll(async () => {
  rulesText = await readFile(join(OPS, "prometheus-rules.yml"), "utf8");
  dashboard = JSON.parse(await readFile(join(OPS, "grafana-dashboard.json"), "utf8")) as Dashboard;
  const panelExprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ where: `panel "${p.title}"`, expr: t.expr })));
  // A query variable's label_values(<selector>, label) selects series too.
  const variableExprs = dashboard.templating.list.flatMap((v) => {
    const query = typeof v.query === "string" ? v.query : (v.query?.query ?? "");
    const selector = /^label_values\((.+),\s*\w+\)$/.exec(query)?.[1];
    return selector === undefined ? [] : [{ where: `variable $${v.name}`, expr: selector }];
  });
  expressions = [
    ...ruleExpressions(rulesText).map((r) => ({ where: `alert ${r.name}`, expr: r.expr })),
    ...panelExprs.map((e) => ({ ...e, expr: substituteGrafanaVariables(e.expr) })),
    ...variableExprs.map((e) => ({ ...e, expr: substituteGrafanaVariables(e.expr) })),
  ];
});

describe("the alert rules (prometheus-rules.yml)", () => {
  it("promtool check rules accepts them, and finds the rules this test reads", async () => {
    const ran = await run(promtool(), ["check", "rules", "prometheus-rules.yml"], { cwd: OPS });
    expect(ran.code, ran.stdout + ran.stderr).toBe(0);
    const found = Number(/SUCCESS: (\d+) rules found/.exec(ran.stdout)?.[1]);
    expect(found, ran.stdout).toBe(ruleExpressions(rulesText).length);
    expect(found).toBeGreaterThanOrEqual(10);
  });

  it("promtool test rules: their unit test (prometheus-rules.test.yml) passes", async () => {
    const ran = await run(promtool(), ["test", "rules", "prometheus-rules.test.yml"], { cwd: OPS });
    expect(ran.code, ran.stdout + ran.stderr).toBe(0);
    expect(ran.stdout).toContain("SUCCESS");
  });
});

describe("the On-call table (packages/gateway/README.md) and the alert rules", () => {
  it("every symptom an operator must act on has an alert: each metric and reason the table names, each 5xx problem, /readyz 503", async () => {
    const readme = await readFile(join(ROOT, "packages", "gateway", "README.md"), "utf8");
    const table = /^### On call\n[\s\S]*?\n\| Symptom \|[^\n]*\n\|[^\n]*\n((?:\|[^\n]*\n)+)/m.exec(readme)?.[1];
    if (table === undefined) throw new Error("packages/gateway/README.md has no On-call table of symptoms");
    const symptoms = table.split("\n").flatMap((row) => (row.startsWith("|") ? [row.split("|")[1] ?? ""] : []));
    expect(symptoms.length).toBeGreaterThan(10);
    const alerts = ruleExpressions(rulesText);
    const metrics = new Set(alerts.flatMap((a) => [...metricNames(a.expr)]));
    const reasons = new Set(alerts.flatMap((a) => labelValues(a.expr, "reason")));
    const statuses = new Set(alerts.flatMap((a) => labelValues(a.expr, "status")));
    const uncovered: string[] = [];
    for (const symptom of symptoms) {
      for (const [, name = ""] of symptom.matchAll(/`(\w+_(?:total|seconds|bytes))\b/g))
        if (![...metrics].some((m) => m.startsWith(`fenced_gateway_${name}`))) uncovered.push(`${symptom.trim()}: ${name}`);
      for (const reason of labelValues(symptom, "reason")) if (!reasons.has(reason)) uncovered.push(`${symptom.trim()}: reason ${reason}`);
      for (const [, status = "", slug = ""] of symptom.matchAll(/\b(5\d\d) `\/problems\/([\w-]+)`/g))
        if (!reasons.has(slug.replaceAll("-", "_")) && !statuses.has(status)) uncovered.push(`${symptom.trim()}: ${status} ${slug}`);
      if (/`\/(?:readyz|healthz)` 503/.test(symptom) && !alerts.some((a) => /route=~?"[^"]*readyz/.test(a.expr)))
        uncovered.push(`${symptom.trim()}: /readyz 503`);
    }
    expect(uncovered, uncovered.join("\n")).toEqual([]);
  });
});

describe("the dashboard (grafana-dashboard.json)", () => {
  it("every panel queries Prometheus, with ids unique, and every expression parses (promtool, as recording rules)", async () => {
    const panels = dashboard.panels.filter((p) => p.type !== "row");
    expect(panels.length).toBeGreaterThanOrEqual(10);
    expect(new Set(dashboard.panels.map((p) => p.id)).size).toBe(dashboard.panels.length);
    for (const p of panels) expect(p.targets?.length ?? 0, p.title).toBeGreaterThan(0);
    const dir = await mkdtemp(join(tmpdir(), "fenced-dashboard-"));
    try {
      const rules = expressions
        .filter((e) => !e.where.startsWith("alert "))
        .map((e, i) => `      - record: dashboard:expr${i}\n        expr: ${JSON.stringify(e.expr)}`);
      await writeFile(join(dir, "dashboard-rules.yml"), `groups:\n  - name: dashboard\n    rules:\n${rules.join("\n")}\n`);
      const ran = await run(promtool(), ["check", "rules", "dashboard-rules.yml"], { cwd: dir });
      expect(ran.code, ran.stdout + ran.stderr).toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("what the rules and the dashboard name, against a running gateway", () => {
  let serving: Serving | undefined;
  let exposition = "";
  const clients = [1, 2, 3].map(() => new Redis("redis://127.0.0.1:1", { lazyConnect: true, maxRetriesPerRequest: 0 }));
  const pool = new pg.Pool({ connectionString: "postgres://fenced@127.0.0.1:1/fenced" });
  const s3 = new S3Client({ endpoint: "http://127.0.0.1:1", region: "us-east-1", credentials: { accessKeyId: "a", secretAccessKey: "b" } });

  beforeAll(async () => {
    // Every backend configured (none reachable: nothing here calls one), so that every metric a
    // backend brings is registered; a labelled metric shows in /metrics by its # TYPE line.
    const gateway = createGateway({
      apiKeys: [{ id: "ops-files", key: "ops-files-key-0123456789", resources: [""], keys: [""] }],
      fenceKeys: [{ id: "ops-files", secret: randomBytes(32) }],
      leases: { clients },
      records: { pool },
      objects: { client: s3, bucket: "ops-files" },
    });
    serving = await serve(gateway.app, { host: "127.0.0.1", port: 0 });
    const res = await fetch(`http://127.0.0.1:${serving.port}/metrics`);
    expect(res.status).toBe(200);
    exposition = await res.text();
  });

  afterAll(async () => {
    await serving?.drain(2_000);
    for (const client of clients) client.disconnect();
    await pool.end();
    s3.destroy();
  });

  it("every metric is one the gateway's /metrics declares (or Prometheus's own `up`)", () => {
    const exported = exportedNames(exposition);
    expect(exported.size).toBeGreaterThan(10);
    const missing = expressions.flatMap(({ where, expr }) =>
      [...metricNames(expr)].filter((name) => !exported.has(name) && !PROMETHEUS_OWN.has(name)).map((name) => `${where}: ${name}`),
    );
    expect(missing, `not in /metrics:\n${missing.join("\n")}`).toEqual([]);
    // Each file names some metric: an extraction that finds nothing would make the check above pass.
    for (const prefix of ["alert ", "panel ", "variable "])
      expect(expressions.filter((e) => e.where.startsWith(prefix)).flatMap((e) => [...metricNames(e.expr)]).length, prefix).toBeGreaterThan(
        0,
      );
  });

  it("every `reason` is one fenced_gateway_writes_rejected_total counts: a problem's slug, drained, aborted or error", () => {
    const unknown = expressions.flatMap(({ where, expr }) =>
      labelValues(expr, "reason")
        .filter((reason) => !REASONS.has(reason))
        .map((reason) => `${where}: ${reason}`),
    );
    expect(unknown).toEqual([]);
    expect(expressions.flatMap((e) => labelValues(e.expr, "reason")).length).toBeGreaterThan(5);
  });
});

describe("the systemd unit (fenced-gateway.service)", () => {
  let unit: string;
  const setting = (key: string): string[] => [...unit.matchAll(new RegExp(`^${key}=(.*)$`, "gm"))].map((m) => m[1] ?? "");

  beforeAll(async () => {
    unit = await readFile(join(OPS, "fenced-gateway.service"), "utf8");
  });

  it("has the hardening options operators expect, and not MemoryDenyWriteExecute, which V8's JIT cannot run under", () => {
    for (const [key, value] of Object.entries({
      DynamicUser: "yes",
      NoNewPrivileges: "yes",
      ProtectSystem: "strict",
      ProtectHome: "yes",
      PrivateTmp: "yes",
      PrivateDevices: "yes",
      RestrictAddressFamilies: "AF_INET AF_INET6 AF_UNIX",
      CapabilityBoundingSet: "",
      SystemCallFilter: "@system-service",
      Restart: "on-failure",
    }))
      expect(setting(key), key).toEqual([value]);
    expect(setting("MemoryDenyWriteExecute")).toEqual([]);
    expect(unit).toMatch(/^# Not MemoryDenyWriteExecute=yes: V8/m);
    // Secrets come from a file systemd reads (or a credential), never from the unit's own lines.
    expect(setting("EnvironmentFile")).toEqual(["/etc/fenced-gateway/gateway.env"]);
    for (const secret of ["API_KEYS", "FENCE_KEYS", "SECRET_ACCESS_KEY", "POSTGRES_URL"])
      expect(setting("Environment").join("\n"), secret).not.toContain(secret);
  });

  it("gives the SIGTERM drain the time it is configured with (TimeoutStopSec longer than the drain)", () => {
    const drain = setting("Environment")
      .map((e) => /^FENCED_GATEWAY_DRAIN_TIMEOUT_MS=(\d+)$/.exec(e)?.[1])
      .find((v) => v !== undefined);
    const stop = /^(\d+)s?$/.exec(setting("TimeoutStopSec")[0] ?? "")?.[1];
    expect(drain, "the unit sets FENCED_GATEWAY_DRAIN_TIMEOUT_MS").toBeDefined();
    expect(stop, "TimeoutStopSec in seconds").toBeDefined();
    expect(Number(stop) * 1000).toBeGreaterThanOrEqual(Number(drain) + 5_000);
    expect(setting("KillSignal")).toEqual(["SIGTERM"]);
  });

  it("names only the gateway's own variables (each in `fenced-gateway --help`)", async () => {
    const help = await run(process.execPath, ["--conditions=source", "--import", "tsx", "packages/gateway/src/cli.ts", "--help"], {
      cwd: ROOT,
    });
    expect(help.code, help.stderr).toBe(0);
    const named = [...unit.matchAll(/FENCED_GATEWAY_[A-Z0-9_]+/g)].map((m) => m[0]);
    expect(named.length).toBeGreaterThan(5);
    for (const variable of new Set(named)) expect(help.stdout, variable).toContain(variable);
  });

  it.skipIf(which("systemd-analyze") === undefined)("systemd-analyze verify accepts it, without a warning", async () => {
    // Verified with this test's node in ExecStart, which must exist: /usr/bin/node is the operator's.
    const dir = await mkdtemp(join(tmpdir(), "fenced-unit-"));
    try {
      await writeFile(join(dir, "fenced-gateway.service"), unit.replace(/^ExecStart=\/usr\/bin\/node /m, `ExecStart=${process.execPath} `));
      const ran = await run("systemd-analyze", ["verify", "--man=no", "./fenced-gateway.service"], { cwd: dir });
      // verify exits 0 on unknown keys and unparsable values, which it only prints.
      expect(ran.stdout + ran.stderr).toBe("");
      expect(ran.code).toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
