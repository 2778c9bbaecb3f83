import { readFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";

export interface CodeBlock {
  /** The Markdown file, relative to the repository root, and the line of the opening fence. */
  readonly source: string;
  readonly line: number;
  readonly lang: string;
  readonly code: string;
}

/** Every fenced code block of a Markdown file, with its language and where it starts. */
export function codeBlocks(root: string, source: string): CodeBlock[] {
  const lines = readFileSync(join(root, source), "utf8").split("\n");
  const blocks: CodeBlock[] = [];
  let open: { line: number; lang: string; body: string[] } | undefined;
  lines.forEach((text, index) => {
    const fence = /^```\s*([\w-]*)/.exec(text);
    if (open === undefined) {
      if (fence !== null) open = { line: index + 1, lang: fence[1] ?? "", body: [] };
    } else if (/^```\s*$/.test(text)) {
      blocks.push({ source, line: open.line, lang: open.lang, code: open.body.join("\n") });
      open = undefined;
    } else {
      open.body.push(text);
    }
  });
  if (open !== undefined) throw new Error(`${source}:${open.line}: a code block is never closed`);
  return blocks;
}

/**
 * Lines of the blocks that declare a name ambiently (`declare const lease: Lease;`): a name the
 * example uses without importing or constructing it, which a reader who pastes the block does not
 * have. Each as "README.md:123: declare const lease: Lease;" (the line inside the Markdown file).
 */
export function ambientDeclarations(blocks: readonly CodeBlock[]): string[] {
  return blocks.flatMap((block) =>
    block.code
      .split("\n")
      .flatMap((text, i) => (/^\s*declare\s/.test(text) ? [`${block.source}:${block.line + 1 + i}: ${text.trim()}`] : [])),
  );
}

/**
 * Writes each block as a module of its own, with a tsconfig and nothing else: no names shared between
 * blocks, none declared for them, so a block that uses a name it neither imports nor defines fails.
 */
export async function writeBlocks(dir: string, blocks: readonly CodeBlock[]): Promise<Map<string, CodeBlock>> {
  await mkdir(dir, { recursive: true });
  const files = new Map<string, CodeBlock>();
  for (const block of blocks) {
    const name = `${block.source.replace(/[^\w]+/g, "-")}-${block.line}.tmp.ts`;
    // `export {}` makes a block without imports a module too: its top-level names stay its own.
    await writeFile(join(dir, name), `${block.code}\nexport {};\n`);
    files.set(name, block);
  }
  const compilerOptions = {
    strict: true,
    exactOptionalPropertyTypes: true,
    noUncheckedIndexedAccess: true,
    target: "es2022",
    lib: ["es2023"],
    module: "nodenext",
    moduleResolution: "nodenext",
    types: ["node"],
    esModuleInterop: true,
    skipLibCheck: true,
    noEmit: true,
    // The examples show calls, not programs: a value they compute and leave unused is fine.
    noUnusedLocals: false,
  };
  await writeFile(join(dir, "tsconfig.json"), `${JSON.stringify({ compilerOptions, files: [...files.keys()] }, null, 2)}\n`);
  return files;
}

/** tsc's errors mapped back to the README: "README.md:123: TS2345 …" (the line inside the Markdown file). */
export function mapErrors(output: string, files: ReadonlyMap<string, CodeBlock>): string[] {
  return output
    .split("\n")
    .filter((line) => /error TS\d+/.test(line))
    .map((line) => {
      const m = /^([^(]+)\((\d+),(\d+)\): (.*)$/.exec(line);
      const block = m === null ? undefined : files.get(m[1] ?? "");
      if (m === null || block === undefined) return line;
      return `${block.source}:${block.line + Number(m[2])}: ${m[4]}`;
    });
}

/** Shell commands of the sh blocks, one per line, continuation lines joined and comments removed. */
export function shellCommands(blocks: readonly CodeBlock[]): string[] {
  return blocks
    .filter((b) => b.lang === "sh" || b.lang === "bash")
    .flatMap((b) => b.code.replace(/\\\n\s*/g, " ").split("\n"))
    .map((line) => line.replace(/\s+#.*$/, "").trim())
    .filter((line) => line !== "" && !line.startsWith("#"))
    .flatMap((line) => line.split(/\s*&&\s*/));
}

/** pnpm's options that take the next word as their value (`--filter @fenced/lock`). */
const PNPM_OPTIONS_WITH_VALUE = new Set(["--filter", "-F", "--dir", "-C", "--workspace-concurrency"]);

/** `pnpm <script>` invocations (options before the script skipped, with their values); pnpm's own commands are left out. */
export function pnpmScripts(commands: readonly string[]): string[] {
  const builtin = new Set(["install", "add", "exec", "dlx", "run", "test", "i", "pack"]);
  const scripts: string[] = [];
  for (const command of commands) {
    const words = command.split(/\s+/);
    if (words[0] !== "pnpm") continue;
    let script: string | undefined;
    for (let i = 1; i < words.length && script === undefined; i++) {
      const word = words[i] as string;
      if (PNPM_OPTIONS_WITH_VALUE.has(word)) i++;
      else if (!word.startsWith("-")) script = word;
    }
    if (script !== undefined && !builtin.has(script)) scripts.push(script);
  }
  // `pnpm test` runs the "test" script: check it like the others.
  if (commands.some((c) => /^pnpm( -\S+)* test\b/.test(c))) scripts.push("test");
  return scripts;
}

/** Paths into the repository that the text names (in commands or in inline code). */
export function repositoryPaths(markdown: string): string[] {
  const paths = markdown.match(/(?<![\w/.-])(?:\.\/)?(?:packages|scripts|bench|test)\/[\w./-]*\.(?:js|mjs|ts|sh|json)\b/g) ?? [];
  return [...new Set(paths)];
}

/** Targets of relative Markdown links ([text](target)), resolved from the file's folder; web and in-page links left out. */
export function relativeLinks(root: string, source: string): string[] {
  const text = readFileSync(join(root, source), "utf8");
  const targets = [...text.matchAll(/\]\(([^)\s#]+)(?:#[^)\s]*)?\)/g)]
    .map((m) => m[1] ?? "")
    .filter((t) => !/^[a-z][a-z0-9+.-]*:/i.test(t));
  return [...new Set(targets)].map((target) => join(dirname(source), target));
}

/** The words of each `npm install` command, to see which packages it installs together. */
export function npmInstalls(commands: readonly string[]): string[][] {
  return commands.map((c) => c.split(/\s+/)).filter((words) => words[0] === "npm" && (words[1] === "install" || words[1] === "i"));
}

/** The file `pnpm pack` writes for a package: "@fenced/lock" 0.1.0 → "fenced-lock-0.1.0.tgz". */
export function tarballName(name: string, version: string): string {
  return `${name.replace(/^@/, "").replace("/", "-")}-${version}.tgz`;
}

/**
 * Whether an install command's words install `name` at `version`: by its name, or by the path of the
 * tarball `pnpm pack` writes for it (nothing is published, so the README installs tarballs).
 */
export function installs(words: readonly string[], name: string, version: string): boolean {
  const tarball = tarballName(name, version);
  return words.some((word) => word === name || word === tarball || word.endsWith(`/${tarball}`));
}

/**
 * Each `new Redis(…)` of the ts blocks that is not followed by `.on("error", …)`: without an
 * application's "error" listener ioredis prints connection errors instead of emitting them, and the
 * lock, which watches them, waits nodeTimeoutMs for a node that refuses connections. As
 * "README.md:123: new Redis(url)" (the line inside the Markdown file).
 */
export function redisClientsWithoutErrorListener(blocks: readonly CodeBlock[]): string[] {
  return blocks.flatMap((block) =>
    [...block.code.matchAll(/\bnew Redis\(/g)].flatMap((m) => {
      const start = m.index;
      let depth = 0;
      let end = start + m[0].length - 1;
      for (; end < block.code.length; end++) {
        if (block.code[end] === "(") depth++;
        else if (block.code[end] === ")" && --depth === 0) break;
      }
      if (/^\s*\.on\(\s*["']error["']/.test(block.code.slice(end + 1))) return [];
      const line = block.line + 1 + block.code.slice(0, start).split("\n").length - 1;
      return [`${block.source}:${line}: ${block.code.slice(start, end + 1)}`];
    }),
  );
}

/** The first block of a Markdown file after the heading `heading` (the whole line, `## …`). */
export function firstBlockAfter(root: string, source: string, heading: string): CodeBlock {
  const at = readFileSync(join(root, source), "utf8").split("\n").indexOf(heading) + 1;
  const block = at === 0 ? undefined : codeBlocks(root, source).find((b) => b.line > at);
  if (block === undefined) throw new Error(`${source} has no code block after ${JSON.stringify(heading)}`);
  return block;
}
