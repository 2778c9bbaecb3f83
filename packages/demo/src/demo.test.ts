import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { XMLParser, XMLValidator } from "fast-xml-parser";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

/**
 * The demo end to end, as a user runs it: the CLI in its own process with --json, all scenarios,
 * every backend (--backend all: S3, PostgreSQL, DynamoDB and Azure Blob), real servers. The assertions re-derive each run's outcome from its event lines
 * rather than trusting the CLI's own verdict.
 */

interface Line {
  scenario: string;
  backend: string;
  mode?: string;
  type: "event" | "run" | "result";
  [field: string]: unknown;
}

interface EventLine extends Line {
  id: string;
  kind: string;
  lane: string;
  label: string;
  message: string;
  outcome?: "accepted" | "refused";
  refusal?: { error: string; token?: string; highest?: string };
  lost?: string[];
}

const SCENARIOS = {
  "gc-pause": ["unfenced", "fenced"],
  "clock-jump": ["unfenced", "fenced"],
  "both-paused": ["unfenced", "ratchet-only", "fence-on-acquire", "version-check"],
} as const;
const BACKENDS = ["s3", "postgres", "dynamodb", "azure-blob"] as const;

let lines: Line[] = [];
let exitCode: number | null = null;
let stderr = "";
let outDir = "";

function events(scenario: string, backend: string, mode: string): EventLine[] {
  return lines.filter((l): l is EventLine => l.type === "event" && l.scenario === scenario && l.backend === backend && l.mode === mode);
}
function runLine(scenario: string, backend: string, mode: string): Line {
  const found = lines.find((l) => l.type === "run" && l.scenario === scenario && l.backend === backend && l.mode === mode);
  if (found === undefined) throw new Error(`no run line for ${scenario}/${backend}/${mode}\n${stderr}`);
  return found;
}
function writesOf(evs: EventLine[], lane: string): EventLine[] {
  return evs.filter((e) => e.kind === "write" && e.lane === lane);
}
function finalOf(evs: EventLine[]): EventLine {
  const final = evs.find((e) => e.kind === "final");
  if (final === undefined) throw new Error("no final read in the run");
  return final;
}

beforeAll(async () => {
  outDir = await mkdtemp(join(tmpdir(), "fenced-demo-test-"));
  const cli = fileURLToPath(new URL("./cli.ts", import.meta.url));
  const tsx = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;
  const child = spawn(process.execPath, ["--import", tsx, "--conditions=source", cli, "--json", "--backend", "all", "--out", outDir], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString("utf8")));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
  exitCode = await new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  lines = stdout
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as Line);
}, 300_000);

afterAll(async () => {
  if (outDir !== "") await rm(outDir, { recursive: true, force: true });
});

describe("pnpm demo --json --backend all (all scenarios, every backend, real servers)", () => {
  it("exits 0; every line has a scenario; the output ends with one result line per scenario and backend", () => {
    // A run that threw says why on stdout (its "run" line's error), not on stderr: both go in the message.
    const failedRuns = lines.filter((l) => l.type === "run" && l.error !== undefined).map((l) => JSON.stringify(l));
    expect(exitCode, [stderr, ...failedRuns].join("\n")).toBe(0);
    for (const l of lines) expect(typeof l.scenario).toBe("string");
    const resultCount = Object.keys(SCENARIOS).length * BACKENDS.length;
    const results = lines.slice(-resultCount);
    expect(results.every((l) => l.type === "result" && l.ok === true)).toBe(true);
    expect(results.map((l) => `${l.scenario}/${l.backend}`).sort()).toEqual(
      Object.keys(SCENARIOS)
        .flatMap((s) => BACKENDS.map((b) => `${s}/${b}`))
        .sort(),
    );
    expect(lines.slice(0, -resultCount).some((l) => l.type === "result")).toBe(false);
  });

  for (const backend of BACKENDS) {
    for (const scenario of ["gc-pause", "clock-jump"] as const) {
      it(`${scenario} on ${backend}, unfenced: both writes are accepted and client 2's update is lost`, () => {
        const evs = events(scenario, backend, "unfenced");
        const [w1] = writesOf(evs, "client-1");
        const [w2] = writesOf(evs, "client-2");
        expect(w1?.outcome).toBe("accepted");
        expect(w2?.outcome).toBe("accepted");
        // Client 2 wrote first, client 1 second, from an older read: the order that loses the update.
        expect(evs.indexOf(w2!)).toBeLessThan(evs.indexOf(w1!));
        expect(finalOf(evs).lost).toEqual(["client 2"]);
        expect(runLine(scenario, backend, "unfenced").finalEntries).toEqual(["initial", "client 1's update"]);
      });

      it(`${scenario} on ${backend}, fenced: client 1 is refused with its stale token and client 2's data is intact`, () => {
        const evs = events(scenario, backend, "fenced");
        const [w1] = writesOf(evs, "client-1");
        const [w2] = writesOf(evs, "client-2");
        expect(w2?.outcome).toBe("accepted");
        expect(w1?.outcome).toBe("refused");
        expect(w1?.refusal).toMatchObject({ error: "StaleTokenError", token: "33", highest: "34" });
        expect(w1?.message).toMatch(/StaleTokenError: token 33 < highest 34/);
        expect(finalOf(evs).lost).toEqual([]);
        expect(runLine(scenario, backend, "fenced").finalEntries).toEqual(["initial", "client 2's update"]);
      });
    }

    it(`clock-jump on ${backend}: node C's clock jumps and both clients believe they hold the lock`, () => {
      for (const mode of SCENARIOS["clock-jump"]) {
        const evs = events("clock-jump", backend, mode);
        expect(evs.map((e) => e.kind)).toEqual(expect.arrayContaining(["clock-jump", "both-hold"]));
        expect(evs.find((e) => e.kind === "acquire" && e.lane === "node-A")?.message).toMatch(/on A, B, C: token 33/);
        expect(evs.find((e) => e.kind === "acquire" && e.lane === "node-E")?.message).toMatch(/on C, D, E: token 34/);
      }
    });

    it(`gc-pause and both-paused on ${backend}: the paused clients are separate processes, stopped until their leases expired`, () => {
      for (const [scenario, mode] of [
        ["gc-pause", "fenced"],
        ["both-paused", "ratchet-only"],
      ] as const) {
        const kinds = events(scenario, backend, mode).map((e) => `${e.lane}:${e.kind}`);
        const pause = kinds.indexOf("client-1:pause");
        expect(pause).toBeGreaterThan(-1);
        expect(kinds.indexOf("client-1:expire")).toBeGreaterThan(pause);
        expect(kinds.indexOf("client-1:resume")).toBeGreaterThan(kinds.indexOf("client-1:expire"));
        expect(events(scenario, backend, mode).find((e) => e.kind === "pause")?.message).toMatch(/pid \d+, state T \(stopped\)/);
      }
    });

    it(`both-paused on ${backend}: the ratchet alone loses client 1's update; fence-on-acquire and version-check stop it`, () => {
      for (const mode of ["unfenced", "ratchet-only"]) {
        const evs = events("both-paused", backend, mode);
        expect(writesOf(evs, "client-1")[0]?.outcome).toBe("accepted");
        expect(writesOf(evs, "client-2")[0]?.outcome).toBe("accepted");
        expect(finalOf(evs).lost).toEqual(["client 1"]);
      }
      const onAcquire = events("both-paused", backend, "fence-on-acquire");
      expect(onAcquire.filter((e) => e.kind === "register").map((e) => e.outcome)).toEqual(["accepted", "accepted"]);
      expect(writesOf(onAcquire, "client-1")[0]?.refusal).toMatchObject({ error: "StaleTokenError", token: "33", highest: "34" });
      expect(finalOf(onAcquire).lost).toEqual([]);
      const versioned = events("both-paused", backend, "version-check");
      expect(writesOf(versioned, "client-1")[0]?.outcome).toBe("accepted");
      expect(writesOf(versioned, "client-2")[0]?.refusal?.error).toBe("VersionMismatchError");
      expect(finalOf(versioned).lost).toEqual([]);
      expect(runLine("both-paused", backend, "version-check").finalEntries).toEqual(["initial", "client 1's update"]);
    });
  }

  it("writes one SVG per run that parses as XML and shows every event of that run", async () => {
    const runs = lines.filter((l) => l.type === "run");
    // Each scenario's modes, on every backend.
    expect(runs).toHaveLength(Object.values(SCENARIOS).flat().length * BACKENDS.length);
    for (const run of runs) {
      const svg = await readFile(String(run.svg), "utf8");
      expect(XMLValidator.validate(svg), String(run.svg)).toBe(true);
      const doc = new XMLParser({
        ignoreAttributes: false,
        attributeNamePrefix: "",
        parseTagValue: false,
        isArray: (_name, _path, _leaf, isAttribute) => !isAttribute,
      }).parse(svg) as unknown;
      const groups = collect(doc);
      const evs = events(run.scenario, run.backend, String(run.mode));
      expect(evs.length).toBeGreaterThan(8);
      expect([...groups.events.keys()].sort()).toEqual(evs.map((e) => e.id).sort());
      for (const e of evs) {
        expect(groups.events.get(e.id), e.id).toContain(e.label);
        // The numbered list under the diagram: number, time, then the message wrapped over lines.
        expect(groups.legend.get(e.id)?.slice(2).join(" "), e.id).toBe(e.message);
      }
    }
  });

  it("writes one HTML page that shows every SVG", async () => {
    const result = lines[lines.length - 1]!;
    const html = await readFile(String(result.html), "utf8");
    for (const run of lines.filter((l) => l.type === "run")) expect(html).toContain(`<img src="${basename(String(run.svg))}"`);
  });
});

/** The texts inside every data-event and data-legend group of a parsed SVG. */
function collect(node: unknown): { events: Map<string, string[]>; legend: Map<string, string[]> } {
  const out = { events: new Map<string, string[]>(), legend: new Map<string, string[]>() };
  const texts = (n: unknown, acc: string[]): string[] => {
    if (Array.isArray(n)) for (const x of n) texts(x, acc);
    else if (typeof n === "object" && n !== null) {
      for (const [k, v] of Object.entries(n)) {
        if (k === "#text") acc.push(String(v));
        else texts(v, acc);
      }
    }
    return acc;
  };
  const walk = (n: unknown): void => {
    if (Array.isArray(n)) for (const x of n) walk(x);
    else if (typeof n === "object" && n !== null) {
      const o = n as Record<string, unknown>;
      if (typeof o["data-event"] === "string") out.events.set(o["data-event"], texts(o, []));
      if (typeof o["data-legend"] === "string") out.legend.set(o["data-legend"], texts(o, []));
      for (const v of Object.values(o)) walk(v);
    }
  };
  walk(node);
  return out;
}
