// Every function the packages ship reads top to bottom on one screen: at most MAX_LINES lines, from
// its first line (the signature; a leading comment not counted) to its closing brace. The sources
// are what the fence, the lock, the store and the gateway ship, each package's src/: tests and their
// support (*test-support.ts) are not measured.
import { globSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const MAX_LINES = 80;
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const PACKAGES = ["fence", "lock", "fenced-store", "gateway"].map((name) => join("packages", name, "src"));

interface Measured {
  readonly name: string;
  /** Line of the function's first line, 1-based. */
  readonly line: number;
  readonly lines: number;
}

/** The name a function goes by: its own, or the variable, property or parameter it is assigned to. */
function nameOf(node: ts.SignatureDeclaration, file: ts.SourceFile): string {
  if (ts.isConstructorDeclaration(node)) return "constructor";
  if (node.name !== undefined) return node.name.getText(file);
  const parent = node.parent;
  if (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent))
    return parent.name.getText(file);
  return "(anonymous)";
}

/**
 * Every function with a body in a TypeScript source — declarations, methods, accessors, constructors,
 * function expressions, arrow functions, nested ones each on its own — with its length in lines.
 */
function functionLengths(source: string, fileName: string): Measured[] {
  const file = ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const lineOf = (position: number): number => file.getLineAndCharacterOfPosition(position).line + 1;
  const found: Measured[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && "body" in node && node.body !== undefined) {
      const line = lineOf(node.getStart(file));
      found.push({ name: nameOf(node, file), line, lines: lineOf(node.getEnd()) - line + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

/** The packages' shipped sources, relative to the repository's root. */
function shippedSources(): string[] {
  return PACKAGES.flatMap((src) => globSync("**/*.ts", { cwd: join(ROOT, src) }).map((path) => join(src, path)))
    .filter((path) => !path.endsWith(".test.ts") && !path.endsWith("test-support.ts") && !path.endsWith(".d.ts"))
    .sort();
}

describe("function length", () => {
  it("counts a function from its signature to its closing brace, nested functions on their own", () => {
    const source = [
      "/** Not counted: the comment. */", // 1
      "export function outer(a: number): number {", // 2
      "  const inner = (b: number): number =>", // 3
      "    b + 1;", // 4
      "  return inner(a);", // 5
      "}", // 6
      "class C {", // 7
      "  method(): void {}", // 8
      "  get value(): number {", // 9
      "    return 1;", // 10
      "  }", // 11
      "}", // 12
      "declare function bodiless(): void;", // 13
    ].join("\n");
    expect(functionLengths(source, "fixture.ts")).toEqual([
      { name: "outer", line: 2, lines: 5 },
      { name: "inner", line: 3, lines: 2 },
      { name: "method", line: 8, lines: 1 },
      { name: "value", line: 9, lines: 3 },
    ]);
  });

  it("measures the four packages' sources, tests and their support left out", () => {
    const files = shippedSources();
    expect(files).toEqual(
      expect.arrayContaining([
        join("packages", "fence", "src", "fence.ts"),
        join("packages", "lock", "src", "redlock.ts"),
        join("packages", "fenced-store", "src", "postgres", "sql.ts"),
        join("packages", "fenced-store", "src", "s3", "multipart.ts"),
        join("packages", "gateway", "src", "cli.ts"),
      ]),
    );
    expect(files.filter((path) => path.endsWith(".test.ts") || path.endsWith("test-support.ts"))).toEqual([]);
  });

  it(`has no function longer than ${MAX_LINES} lines`, () => {
    const tooLong = shippedSources().flatMap((path) =>
      functionLengths(readFileSync(join(ROOT, path), "utf8"), path)
        .filter((f) => f.lines > MAX_LINES)
        .map((f) => `${path}:${f.line} ${f.name}: ${f.lines} lines`),
    );
    expect(tooLong).toEqual([]);
  });
});
