// What the operators' files under packages/gateway/ops name: the expressions of the alert rules and
// of the dashboard, the metric names and label values in those, and the series names a /metrics
// answer declares. ops-files.test.ts checks the first against the last.

/** An alert's (or recording rule's) name and its PromQL expression. */
interface RuleExpression {
  readonly name: string;
  readonly expr: string;
}

/**
 * The rules of a Prometheus rule file as prometheus-rules.yml writes them: `- alert: Name` (or
 * `- record:`) followed by `expr: <one line>` or `expr: |` and a more indented block. A rule file
 * written another way yields fewer rules than promtool counts, which the test compares.
 */
export function ruleExpressions(yaml: string): RuleExpression[] {
  const lines = yaml.split("\n");
  const rules: RuleExpression[] = [];
  let name: string | undefined;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? "";
    const rule = /^\s*- (?:alert|record):\s*(\S+)\s*$/.exec(line);
    if (rule !== null) name = rule[1];
    const expr = /^(\s*)expr:\s*(.*)$/.exec(line);
    if (expr === null || name === undefined) continue;
    const indent = (expr[1] ?? "").length;
    let text = expr[2] ?? "";
    if (text === "|" || text === ">") {
      const block: string[] = [];
      while (i + 1 < lines.length && (/^\s*$/.test(lines[i + 1] ?? "") || leading(lines[i + 1] ?? "") > indent))
        block.push(lines[++i] ?? "");
      text = block.join("\n");
    }
    rules.push({ name, expr: text.trim() });
    name = undefined;
  }
  return rules;
}

const leading = (line: string): number => line.length - line.trimStart().length;

/** PromQL's words that are not series: binary operators, modifiers and number literals. */
const KEYWORDS = new Set([
  "and",
  "or",
  "unless",
  "bool",
  "offset",
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "inf",
  "nan",
]);

/** Grafana's variables (`$job`, `${datasource}`, `$__rate_interval`) as Prometheus would see them after substitution. */
export function substituteGrafanaVariables(expr: string): string {
  return expr.replace(/\$__(?:rate_)?interval|\$__range/g, "5m").replace(/\$\{\w+\}|\$\w+/g, ".*");
}

/**
 * The metric names an expression selects: every identifier that is not a function or aggregation
 * (followed by `(`), a keyword, a label name (inside `{…}` or a `by (…)` / `on (…)` list), a string,
 * or a duration.
 */
export function metricNames(expr: string): Set<string> {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ");
  const names = new Set<string>();
  for (const m of bare.matchAll(/(?<![\w.:$])([a-zA-Z_:][\w:]*)(\s*\()?/g)) {
    const word = m[1] ?? "";
    if (m[2] === undefined && !KEYWORDS.has(word.toLowerCase())) names.add(word);
  }
  return names;
}

/** The values an expression's matchers give a label: `reason="a"` → a; `reason=~"a|b"` → a, b. */
export function labelValues(expr: string, label: string): string[] {
  const values: string[] = [];
  for (const m of expr.matchAll(new RegExp(`\\b${label}\\s*(=~|=)\\s*"([^"]*)"`, "g")))
    values.push(...(m[1] === "=~" ? (m[2] ?? "").split("|") : [m[2] ?? ""]));
  return values;
}

/**
 * The series names a /metrics answer (Prometheus text format) declares, by its `# TYPE` lines, so
 * that a labelled metric nothing has observed yet counts too: a histogram's `_bucket`, `_sum` and
 * `_count`, a summary's quantiles, `_sum` and `_count`.
 */
export function exportedNames(exposition: string): Map<string, string> {
  const names = new Map<string, string>();
  for (const m of exposition.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    const [, name = "", type = ""] = m;
    names.set(name, type);
    if (type === "histogram") for (const suffix of ["_bucket", "_sum", "_count"]) names.set(name + suffix, type);
    if (type === "summary") for (const suffix of ["_sum", "_count"]) names.set(name + suffix, type);
  }
  return names;
}
