// The README as a newcomer reads it, without a server: its first screen sets a fresh machine up; its
// install commands work where nothing is published; its curl lines use only variables something
// set, and resources its own API key may use. (The commands themselves run in test/release.)
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { codeBlocks, npmInstalls, shellCommands, type CodeBlock } from "../release/readme.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const PACKAGES = ["fence", "lock", "fenced-store", "gateway"].map((dir) => `packages/${dir}/README.md`);
const READMES = ["README.md", ...readdirSync(join(ROOT, "docs")).map((f) => `docs/${f}`), ...PACKAGES].filter((f) => f.endsWith(".md"));
/** A screen of a terminal or a browser window: what a reader sees before scrolling. */
const SCREEN_LINES = 50;
/** The two commands that set a fresh machine up (bootstrap.sh), each followed by what it is for. */
const SET_UP = ["./scripts/bootstrap.sh && pnpm demo", "./scripts/bootstrap.sh && pnpm test"];

const lines = (source: string): string[] => readFileSync(join(ROOT, source), "utf8").split("\n");
const shBlocks = (source: string): CodeBlock[] => codeBlocks(ROOT, source).filter((b) => b.lang === "sh" || b.lang === "bash");

/** What `pnpm servers` (packages/servers/src/cli.ts) exports, by name. */
function serversExports(): Set<string> {
  const source = readFileSync(join(ROOT, "packages", "servers", "src", "cli.ts"), "utf8");
  return new Set([...source.matchAll(/\["([A-Z][A-Z0-9_]*)", /g)].map((m) => m[1] ?? ""));
}

describe("the README's first screen", () => {
  it("holds the Quick start: the two set-up commands, what each prints, before any other command", () => {
    const screen = lines("README.md").slice(0, SCREEN_LINES).join("\n");
    expect(screen).toContain("## Quick start");
    for (const command of SET_UP) expect(screen, command).toContain(command);
    // What each prints, in words a newcomer can compare with their terminal.
    expect(screen).toContain("Every run showed what it should");
    expect(screen).toMatch(/Test Files {2}… passed/);
    // The README's first command is bootstrap.sh: every other needs what it installs.
    const [first] = shellCommands(shBlocks("README.md"));
    expect(first).toBe("./scripts/bootstrap.sh");
    // And on the first screen too: a first fenced write and the gateway, against servers of this machine.
    expect(screen).toMatch(/pnpm (-s )?servers/);
    expect(screen).toMatch(/node packages\/gateway\/dist\/cli\.js/);
  });

  it("no command runs pnpm install (bootstrap.sh does it, on a supported Node)", () => {
    const commands = READMES.flatMap((source) => shellCommands(shBlocks(source)));
    expect(commands.filter((c) => /^pnpm (install|i)\b/.test(c))).toEqual([]);
  });
});

describe("installs that work as written", () => {
  it("no README installs a package by a name no registry has: each installs the tarballs `pnpm pack` writes", () => {
    const names = ["@fenced/fence", "@fenced/lock", "@fenced/store", "@fenced/gateway"];
    for (const source of READMES) {
      for (const words of npmInstalls(shellCommands(shBlocks(source))))
        expect(
          words.filter((w) => names.includes(w)),
          `${source}: ${words.join(" ")}`,
        ).toEqual([]);
    }
    // Each package's README says how to install it.
    for (const source of PACKAGES) expect(npmInstalls(shellCommands(shBlocks(source))).length, source).toBeGreaterThan(0);
  });
});

describe("the curl lines", () => {
  it("use only variables set before them in their file, or exported by `pnpm servers`", () => {
    const exported = serversExports();
    for (const name of ["REDIS_URLS", "DATABASE_URL", "KEY", "S3_BUCKET", "FENCED_GATEWAY_API_KEYS"]) expect([...exported]).toContain(name);
    for (const source of ["README.md", "packages/gateway/README.md"]) {
      const set = new Set([...exported, "HOME", "PWD"]);
      const unset: string[] = [];
      for (const block of shBlocks(source)) {
        for (const line of block.code.split("\n")) {
          const code = line.replace(/\s#.*$/, "");
          for (const m of code.matchAll(/\$\{?([A-Za-z_][A-Za-z0-9_]*)/g)) {
            const name = m[1] ?? "";
            // jq's own variables ($lease, $a) are lowercase; a shell's here are upper case.
            if (/^[A-Z]/.test(name) && !set.has(name)) unset.push(`${source}:${block.line}: $${name}`);
          }
          for (const m of code.matchAll(/(?:^|[;\s])(?:export\s+)?([A-Z][A-Z0-9_]*)=/g)) set.add(m[1] ?? "");
        }
      }
      expect(unset, source).toEqual([]);
    }
  });

  it("name only resources and keys the README's own API key may use", () => {
    for (const source of ["README.md", "packages/gateway/README.md"]) {
      const text = readFileSync(join(ROOT, source), "utf8");
      const keyLine = /export FENCED_GATEWAY_API_KEYS='(\[.*\])'/.exec(text)?.[1];
      expect(keyLine, source).toBeDefined();
      const [key] = JSON.parse(keyLine ?? "[]") as { resources: string[]; keys: string[] }[];
      const code = shBlocks(source)
        .map((b) => b.code)
        .join("\n");
      const resources = [...code.matchAll(/"resources?":\s*(\[[^\]]*\]|"[^"]*")/g)].flatMap((m) => {
        const value = JSON.parse(m[1] ?? "null") as string | string[];
        return Array.isArray(value) ? value : [value];
      });
      const keys = [...code.matchAll(/\/v1\/(?:records|objects)\/([\w./-]+)/g)].map((m) => m[1] ?? "");
      expect(resources.length + keys.length, source).toBeGreaterThan(0);
      const outside = (prefixes: string[], names: string[]) => names.filter((n) => !prefixes.some((p) => n.startsWith(p)));
      expect(outside(key?.resources ?? [], resources), `${source}: resources outside the key's`).toEqual([]);
      expect(outside(key?.keys ?? [], keys), `${source}: keys outside the key's`).toEqual([]);
      expect(readFileSync(join(ROOT, "packages", "servers", "src", "cli.ts"), "utf8")).toContain(
        `resources: ${JSON.stringify(key?.resources).replace(/,/g, ", ")}`,
      );
    }
  });
});
