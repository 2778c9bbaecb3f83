import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { dirname, join, normalize, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { runOk } from "./exec.js";

export const ROOT = fileURLToPath(new URL("../../", import.meta.url));

/** The published packages, each after the packages it imports. */
export const PUBLIC_PACKAGES = [
  { name: "@fenced/fence", dir: "packages/fence" },
  { name: "@fenced/lock", dir: "packages/lock" },
  { name: "@fenced/store", dir: "packages/fenced-store" },
  { name: "@fenced/gateway", dir: "packages/gateway" },
] as const;

/** Files every package carries besides what its exports, bin and source maps reach. */
const ALWAYS = new Set(["package.json", "README.md", "LICENSE"]);

/** The gateway's files for operators (packages/gateway/ops): shipped as they are, reached by no import. */
export const GATEWAY_OPS_FILES = [
  "ops/README.md",
  "ops/fenced-gateway.service",
  "ops/grafana-dashboard.json",
  "ops/prometheus-rules.test.yml",
  "ops/prometheus-rules.yml",
];

interface PackedFile {
  readonly path: string;
  readonly bytes: number;
}

export interface Tarball {
  readonly name: string;
  readonly file: string;
  readonly bytes: number;
  /** The tarball unpacked: its files are under `${unpacked}/package`. */
  readonly unpacked: string;
  readonly files: readonly PackedFile[];
  readonly manifest: Manifest;
  /** How long `pnpm pack` took, its build included. */
  readonly packMs: number;
}

export interface Manifest {
  readonly name: string;
  readonly version: string;
  readonly private?: boolean;
  readonly license?: string;
  readonly engines?: Record<string, string>;
  readonly exports?: Record<string, Record<string, string>>;
  readonly bin?: Record<string, string>;
  readonly dependencies?: Record<string, string>;
  readonly peerDependencies?: Record<string, string>;
  readonly optionalDependencies?: Record<string, string>;
  readonly [field: string]: unknown;
}

function walk(dir: string, base = dir): PackedFile[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? walk(path, base) : [{ path: relative(base, path), bytes: statSync(path).size }];
  });
}

/**
 * `pnpm pack` every public package into `dest` (its prepack builds it from a clean dist/) and unpacks
 * each. The packs run side by side: a package's build type-checks against the sources of the packages
 * it imports (the "source" condition), not their dist/, so no build waits for another.
 */
export async function packAll(dest: string): Promise<Tarball[]> {
  return Promise.all(PUBLIC_PACKAGES.map((pkg) => pack(pkg, dest)));
}

async function pack(pkg: (typeof PUBLIC_PACKAGES)[number], dest: string): Promise<Tarball> {
  const cwd = join(ROOT, pkg.dir);
  const packed = await runOk("pnpm", ["pack", "--pack-destination", dest, "--json"], { cwd, timeoutMs: 240_000 });
  // pnpm prints the prepack's output before its JSON answer.
  const { filename } = JSON.parse(packed.stdout.slice(packed.stdout.indexOf("{"))) as { filename: string };
  const file = filename.startsWith("/") ? filename : join(dest, filename);
  const unpacked = join(dest, "unpacked", pkg.dir.split("/").pop() ?? pkg.dir);
  await mkdir(unpacked, { recursive: true });
  await runOk("tar", ["-xzf", file, "-C", unpacked], { cwd: dest });
  const files = walk(join(unpacked, "package")).sort((a, b) => a.path.localeCompare(b.path));
  const manifest = JSON.parse(readFileSync(join(unpacked, "package", "package.json"), "utf8")) as Manifest;
  return { name: pkg.name, file, bytes: statSync(file).size, unpacked, files, manifest, packMs: packed.ms };
}

/**
 * Specifiers a compiled module or declaration file loads: import and export statements (tsc writes
 * each at the start of a line), side-effect imports, import() calls and `import("…")` types.
 */
function specifiers(text: string, dynamic: boolean): string[] {
  // An import or re-export statement never holds parentheses, and its specifier ends the statement:
  // so `export function f(from) { g(from, "options.from") }` is not mistaken for one.
  const patterns = [
    /^(?:import|export)\s[^;()]*?\bfrom\s*["']([^"'\n]+)["']\s*;?\s*$/gm,
    /^import\s*["']([^"'\n]+)["']\s*;?\s*$/gm,
    ...(dynamic ? [/\bimport\(\s*["']([^"'\n]+)["']\s*\)/g] : []),
  ];
  return patterns.flatMap((pattern) => [...text.matchAll(pattern)].map((m) => m[1] ?? ""));
}

function sourceMapOf(text: string): string | undefined {
  return /\/\/# sourceMappingURL=(\S+)\s*$/.exec(text)?.[1];
}

/** A bare specifier's package name: "@aws-sdk/client-s3/x" → "@aws-sdk/client-s3", "pg" → "pg". */
function packageOf(specifier: string): string {
  const parts = specifier.split("/");
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : (parts[0] ?? specifier);
}

export interface Closure {
  /** Paths in the package reached. */
  readonly reached: Set<string>;
  /** References that point at nothing in the package. */
  readonly missing: string[];
  /** Packages (not node: builtins) loaded by the .js files reached, and by the .d.ts files reached. */
  readonly runtimeImports: Set<string>;
  readonly typeImports: Set<string>;
  /** The bare specifiers the .js files reached import, subpaths kept ("@fenced/store/s3"). */
  readonly runtimeSpecifiers: Set<string>;
}

/**
 * Everything reached from `starts` (default: every target of `exports` and `bin`): what they import
 * (relative imports, followed from .js to .js and from .d.ts to .d.ts), the declaration beside each
 * module reached, every source map those name, and every source file those maps name. With `dynamic`
 * false, an `import()` is not followed: what a module loads when it starts, not what it may load later.
 */
export function closure(tarball: Tarball, starts?: readonly string[], { dynamic = true } = {}): Closure {
  const root = join(tarball.unpacked, "package");
  const result: Closure = {
    reached: new Set(),
    missing: [],
    runtimeImports: new Set(),
    typeImports: new Set(),
    runtimeSpecifiers: new Set(),
  };
  const queue: { path: string; from: string }[] = [];
  const add = (path: string, from: string): void => {
    queue.push({ path: normalize(path), from });
  };
  const bins = new Set(Object.values(tarball.manifest.bin ?? {}).map((path) => normalize(path)));
  if (starts !== undefined) for (const path of starts) add(path, "start");
  else {
    for (const [subpath, conditions] of Object.entries(tarball.manifest.exports ?? {})) {
      for (const target of Object.values(conditions)) add(target, `exports["${subpath}"]`);
    }
    for (const path of bins) add(path, "bin");
  }
  while (queue.length > 0) {
    const { path, from } = queue.shift() ?? { path: "", from: "" };
    if (result.reached.has(path)) continue;
    if (!existsSync(join(root, path))) {
      result.missing.push(`${path} (from ${from})`);
      continue;
    }
    result.reached.add(path);
    if (path.endsWith(".map")) {
      const map = JSON.parse(readFileSync(join(root, path), "utf8")) as { sources?: string[] };
      for (const source of map.sources ?? []) add(join(dirname(path), source), path);
      continue;
    }
    if (!path.endsWith(".js") && !path.endsWith(".d.ts")) continue;
    const text = readFileSync(join(root, path), "utf8");
    const declaration = path.endsWith(".d.ts");
    for (const specifier of specifiers(text, dynamic)) {
      if (specifier.startsWith("./") || specifier.startsWith("../")) {
        const target = join(dirname(path), specifier);
        add(declaration ? target.replace(/\.js$/, ".d.ts") : target, path);
      } else if (!specifier.startsWith("node:")) {
        (declaration ? result.typeImports : result.runtimeImports).add(packageOf(specifier));
        if (!declaration) result.runtimeSpecifiers.add(specifier);
      }
    }
    const map = sourceMapOf(text);
    if (map !== undefined) add(join(dirname(path), map), path);
    if (starts !== undefined) continue;
    // A module's declaration ships with it (a bin is run, never imported: it has none); so does the
    // module of a declaration (empty for a types-only module, which nothing imports at run time).
    if (!declaration && !bins.has(path)) add(path.replace(/\.js$/, ".d.ts"), path);
    const sibling = path.replace(/\.d\.ts$/, ".js");
    if (declaration && existsSync(join(root, sibling))) add(sibling, path);
  }
  return result;
}

/** Files in the tarball that nothing reaches: stale build output, scratch files, tests. */
export function unreached(tarball: Tarball): string[] {
  const { reached } = closure(tarball);
  const ops = new Set(tarball.name === "@fenced/gateway" ? GATEWAY_OPS_FILES : []);
  return tarball.files.map((f) => f.path).filter((path) => !reached.has(path) && !ALWAYS.has(path) && !ops.has(path));
}

/** Every string value in a manifest, with its path (to find "workspace:" anywhere in it). */
export function manifestStrings(value: unknown, path = ""): { path: string; value: string }[] {
  if (typeof value === "string") return [{ path, value }];
  if (typeof value !== "object" || value === null) return [];
  return Object.entries(value).flatMap(([key, inner]) => manifestStrings(inner, `${path}.${key}`));
}

/** The exports map's conditions, flattened: each subpath with its condition names. */
export function exportConditions(manifest: Manifest): string[] {
  return Object.values(manifest.exports ?? {}).flatMap((conditions) => Object.keys(conditions));
}

export function formatTarball(tarball: Tarball): string {
  const unpackedBytes = tarball.files.reduce((sum, f) => sum + f.bytes, 0);
  const lines = [
    `${tarball.name}@${tarball.manifest.version}: ${tarball.file.split("/").pop()} ${tarball.bytes} bytes packed, ${unpackedBytes} bytes unpacked, ${tarball.files.length} files (pack with build: ${tarball.packMs} ms)`,
  ];
  for (const f of tarball.files) lines.push(`  ${String(f.bytes).padStart(8)}  ${f.path}`);
  return lines.join("\n");
}
