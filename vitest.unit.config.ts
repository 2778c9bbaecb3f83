import { globSync, readFileSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import { defineConfig } from "vitest/config";
import base from "./vitest.config.js";

/**
 * `pnpm test:unit`: the tests that need no server, in seconds, while editing; `pnpm test` runs them
 * with the rest. A test needs servers when it, or a module of this repository it imports (relative
 * imports, followed transitively; type-only imports are not), names @fenced/servers or a subpath of it
 * other than SERVER_FREE_SUBPATHS (or chaos or demo, which use it), child_process or testcontainers — it starts Redis, PostgreSQL, radosgw or
 * another process. The rule errs one way only: a test it cannot prove server-free (an import it cannot
 * read included) stays out of this tier, never out of `pnpm test`.
 */
// The subpaths of @fenced/servers that load nothing else of it (no server, no process), each saying so
// at its top; any other subpath is taken to start servers.
const SERVER_FREE_SUBPATHS = ["random", "sockets", "s3-keys", "heap"];
const STARTS_SERVERS = new RegExp(
  `["'](@fenced/(chaos|demo|servers(/(?!(${SERVER_FREE_SUBPATHS.join("|")})["'])[^"']*)?)|(node:)?child_process|testcontainers)["']`,
);
const LOCAL_IMPORT =
  /^\s*(?:import|export)\s+(?!type\s)[^;]*?from\s+["'](\.[^"']+)["']|import\(\s*["'](\.[^"']+)["']\s*\)|^\s*import\s+["'](\.[^"']+)["']/gm;

const verdicts = new Map<string, boolean>();
function needsServers(file: string, seen = new Set<string>()): boolean {
  const known = verdicts.get(file);
  if (known !== undefined) return known;
  if (seen.has(file)) return false;
  seen.add(file);
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    return true; // an import this rule cannot read (a .js file, a directory): not proven server-free
  }
  let verdict = STARTS_SERVERS.test(text);
  for (const m of text.matchAll(LOCAL_IMPORT)) {
    if (verdict) break;
    const spec = (m[1] ?? m[2] ?? m[3]) as string;
    verdict = needsServers(normalize(join(dirname(file), spec.replace(/\.js$/, ".ts"))), seen);
  }
  verdicts.set(file, verdict);
  return verdict;
}

const all = base.test?.include ?? [];
const unit = all.flatMap((pattern) => globSync(pattern, { exclude: (f) => f.includes("node_modules") })).filter((f) => !needsServers(f));

export default defineConfig({ ...base, test: { ...base.test, include: unit } });
