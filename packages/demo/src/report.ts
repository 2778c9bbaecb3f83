import type { RunRecord } from "./scenarios/context.js";
import type { DemoEvent, RunId } from "./timeline.js";

/** What the CLI says while it runs: narration for a person, or JSON lines for a program. */
export interface Reporter {
  /** Long steps (server start-up, waiting for a lease to expire). */
  progress(message: string): void;
  info(message: string): void;
  runStart(run: RunId, title: string): void;
  event(event: DemoEvent): void;
  runEnd(record: RunRecord, svg: string): void;
  runFailed(run: RunId, error: unknown): void;
  results(lines: readonly ResultLine[], seconds: number, html: string): void;
}

export interface RunSummary {
  readonly mode: string;
  readonly expected: string;
  readonly observed: string;
  readonly ok: boolean;
  readonly summary: string;
}

/** One per scenario and backend, last in the JSON output. */
export interface ResultLine {
  readonly scenario: string;
  readonly backend: string;
  readonly ok: boolean;
  readonly runs: readonly RunSummary[];
  readonly servers: readonly string[];
}

/** Tokens are bigint in the library; on the wire they are decimal strings already, so plain JSON holds them. */
function line(value: Record<string, unknown>): string {
  return `${JSON.stringify(value)}\n`;
}

export function jsonReporter(out: NodeJS.WritableStream, err: NodeJS.WritableStream): Reporter {
  return {
    progress: (message) => err.write(`… ${message}\n`),
    info: (message) => err.write(`${message}\n`),
    runStart: () => undefined,
    event: (e) => {
      const [scenario, backend, mode] = e.id.slice(0, e.id.indexOf("#")).split("/");
      out.write(line({ scenario, backend, mode, type: "event", ...e }));
    },
    runEnd: (r, svg) => {
      const v = r.verdict;
      out.write(
        line({
          scenario: r.scenario,
          backend: r.backend,
          mode: r.mode,
          type: "run",
          expected: v.expected,
          observed: v.observed,
          ok: v.ok,
          summary: v.summary,
          lost: v.lost,
          refused: v.refused,
          finalEntries: v.finalEntries,
          failures: v.failures,
          events: r.events.length,
          svg,
        }),
      );
    },
    runFailed: (run, error) => {
      out.write(line({ ...run, type: "run", ok: false, observed: "error", error: error instanceof Error ? error.message : String(error) }));
    },
    results: (lines, seconds, html) => {
      for (const l of lines)
        out.write(
          line({ scenario: l.scenario, backend: l.backend, type: "result", ok: l.ok, runs: l.runs, servers: l.servers, html, seconds }),
        );
    },
  };
}

const ESC = "\u001b[";

export function terminalReporter(out: NodeJS.WritableStream & { isTTY?: boolean }): Reporter {
  const color = out.isTTY === true && process.env.NO_COLOR === undefined;
  const paint = (code: string, text: string): string => (color ? `${ESC}${code}m${text}${ESC}0m` : text);
  const red = (t: string): string => paint("31", t);
  const green = (t: string): string => paint("32", t);
  const dim = (t: string): string => paint("2", t);
  const bold = (t: string): string => paint("1", t);
  return {
    progress: (message) => out.write(dim(`  … ${message}\n`)),
    info: (message) => out.write(`${message}\n`),
    runStart: (_run, title) => out.write(`\n${bold(`▶ ${title}`)}\n`),
    event: (e) => {
      const text = e.outcome === "refused" ? red(e.message) : e.outcome === "accepted" ? green(e.message) : e.message;
      out.write(`  ${dim(`[${String(e.t).padStart(5)} ms]`)} ${text}\n`);
    },
    runEnd: (r, svg) => {
      const v = r.verdict;
      const head = v.observed === "anomaly" ? red("ANOMALY") : v.observed === "protected" ? green("PROTECTED") : red("INCONCLUSIVE");
      const expectation = v.ok ? green(`as expected (${v.expected})`) : red(`NOT as expected: ${v.failures.join("; ")}`);
      out.write(`  ⇒ ${head}: ${v.summary}\n    ${expectation}; picture: ${dim(svg)}\n`);
    },
    runFailed: (run, error) =>
      out.write(
        red(
          `  ⇒ ERROR in ${run.scenario}/${run.backend}/${run.mode}: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
        ),
      ),
    results: (lines, seconds, html) => {
      out.write(`\n${bold("Results")}\n`);
      for (const l of lines) {
        for (const r of l.runs) {
          const mark = r.ok ? green("✓") : red("✗");
          out.write(
            `  ${mark} ${l.scenario.padEnd(12)} ${l.backend.padEnd(9)} ${r.mode.padEnd(17)} expected ${r.expected.padEnd(9)} observed ${r.observed}\n`,
          );
        }
      }
      const ok = lines.every((l) => l.ok);
      out.write(
        `\n${ok ? green("Every run showed what it should: the anomaly without fencing (and with the ratchet alone in both-paused), and no lost update with it.") : red("Some runs did not show what they should (see above).")}\n`,
      );
      out.write(`Took ${seconds.toFixed(1)} s. Pictures: ${bold(html)}\n`);
    },
  };
}
