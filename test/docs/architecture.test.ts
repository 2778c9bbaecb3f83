// ARCHITECTURE.md follows the code: every file it links exists, and every name it writes as
// "`name` in [file](path)" is declared in that file. A rename that leaves the page behind fails here.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const PAGE = "ARCHITECTURE.md";

interface Link {
  readonly target: string;
  readonly line: number;
}

interface NamedSymbol {
  readonly name: string;
  readonly file: string;
  readonly line: number;
}

const lineAt = (text: string, index: number): number => text.slice(0, index).split("\n").length;

/** Relative link targets ([text](target), an #anchor dropped); web links and in-page anchors left out. */
function relativeLinks(markdown: string): Link[] {
  return [...markdown.matchAll(/\]\(([^)\s#]+)(?:#[^)\s]*)?\)/g)]
    .filter((m) => !/^[a-z][a-z0-9+.-]*:/i.test(m[1] ?? ""))
    .map((m) => ({ target: m[1] ?? "", line: lineAt(markdown, m.index) }));
}

/**
 * The names the page says a file declares: "`a` in [f](f)", "`a`, `b` in [f](f)", "`a` and `b` in
 * [f](f)", across a line break too. `A.b` names member b of class or interface A.
 */
function namedSymbols(markdown: string): NamedSymbol[] {
  const pattern = /((?:`[^`\n]+`(?:,\s+|\s+and\s+|\s+or\s+))*`[^`\n]+`)\s+in\s+\[[^\]]*\]\(([^)\s#]+)(?:#[^)\s]*)?\)/g;
  return [...markdown.matchAll(pattern)].flatMap((m) =>
    [...(m[1] ?? "").matchAll(/`([^`]+)`/g)].map((n) => ({ name: n[1] ?? "", file: m[2] ?? "", line: lineAt(markdown, m.index) })),
  );
}

/**
 * Every name a TypeScript file declares: functions, classes, variables (at any depth), interfaces,
 * types, enums and namespaces, and the methods, properties and accessors of classes and interfaces,
 * the last also as `Container.member`.
 */
function declaredNames(source: string, fileName: string): Set<string> {
  const file = ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  const names = new Set<string>();
  const visit = (node: ts.Node, container: string | undefined): void => {
    let inside = container;
    if (
      ts.isFunctionDeclaration(node) ||
      ts.isClassDeclaration(node) ||
      ts.isInterfaceDeclaration(node) ||
      ts.isTypeAliasDeclaration(node) ||
      ts.isEnumDeclaration(node) ||
      ts.isModuleDeclaration(node) ||
      ts.isVariableDeclaration(node)
    ) {
      if (node.name !== undefined && (ts.isIdentifier(node.name) || ts.isStringLiteral(node.name))) {
        names.add(node.name.text);
        if (ts.isClassDeclaration(node) || ts.isInterfaceDeclaration(node)) inside = node.name.text;
      }
    } else if (
      ts.isMethodDeclaration(node) ||
      ts.isMethodSignature(node) ||
      ts.isPropertyDeclaration(node) ||
      ts.isPropertySignature(node) ||
      ts.isGetAccessorDeclaration(node) ||
      ts.isSetAccessorDeclaration(node)
    ) {
      if (ts.isIdentifier(node.name) || ts.isPrivateIdentifier(node.name)) {
        names.add(node.name.text);
        if (container !== undefined) names.add(`${container}.${node.name.text}`);
      }
    }
    // A member's body is not the class's: a function declared inside a method is not a member.
    const member = ts.isClassElement(node) || ts.isTypeElement(node);
    const next = ts.isClassDeclaration(node) || ts.isInterfaceDeclaration(node) ? inside : member ? undefined : inside;
    ts.forEachChild(node, (child) => visit(child, next));
  };
  visit(file, undefined);
  return names;
}

/** What is wrong with a page's links and named symbols, read against the files under `root`: one line each. */
function problems(markdown: string, root: string, page: string): string[] {
  const found: string[] = [];
  for (const { target, line } of relativeLinks(markdown))
    if (!existsSync(join(root, target))) found.push(`${page}:${line}: links to ${target}, which does not exist`);
  const declared = new Map<string, Set<string>>();
  for (const { name, file, line } of namedSymbols(markdown)) {
    if (!/\.(?:ts|js|mjs)$/.test(file)) {
      found.push(`${page}:${line}: \`${name}\` named in ${file}, which is not a TypeScript or JavaScript file`);
      continue;
    }
    if (!existsSync(join(root, file))) continue; // reported with the links
    let names = declared.get(file);
    if (names === undefined) {
      names = declaredNames(readFileSync(join(root, file), "utf8"), file);
      declared.set(file, names);
    }
    if (!names.has(name)) found.push(`${page}:${line}: \`${name}\` is not declared in ${file}`);
  }
  return found;
}

describe("ARCHITECTURE.md", () => {
  const markdown = readFileSync(join(ROOT, PAGE), "utf8");

  it("links only to files that exist, and every name it places in a file is declared there", () => {
    expect(problems(markdown, ROOT, PAGE)).toEqual([]);
  });

  it("names a symbol beside every source file it links to, and both walks' stops are there", () => {
    const named = namedSymbols(markdown);
    expect(named.length).toBeGreaterThan(40);
    // The two paths the page follows end where the protocol decides: the SQL statement and the conditional PUT.
    const pairs = new Set(named.map((n) => `${n.name} ${n.file}`));
    for (const stop of [
      "recordsRouter packages/gateway/src/routes/records.ts",
      "FencedPostgres.put packages/fenced-store/src/postgres/store.ts",
      "statements packages/fenced-store/src/postgres/sql.ts",
      "objectsRouter packages/gateway/src/routes/objects.ts",
      "FencedS3.put packages/fenced-store/src/s3/store.ts",
      "writeManifest packages/fenced-store/src/cas/write.ts",
      "ConditionalObjects packages/fenced-store/src/s3/conditional.ts",
    ])
      expect(pairs, stop).toContain(stop);
  });
});

describe("the check itself", () => {
  it("reports a name its file does not declare, a member of the wrong class, and a missing file", () => {
    const page = [
      "`admits` in [fence.ts](packages/fence/src/fence.ts),",
      "`FencedS3.put` and `FencedS3.nonesuch` in [store.ts](packages/fenced-store/src/s3/store.ts),",
      "`Calls.put` in [calls.ts](packages/fenced-store/src/postgres/calls.ts), and",
      "`gone` in [gone.ts](packages/nowhere/gone.ts).",
    ].join("\n");
    expect(problems(page, ROOT, "page.md")).toEqual([
      "page.md:4: links to packages/nowhere/gone.ts, which does not exist",
      "page.md:2: `FencedS3.nonesuch` is not declared in packages/fenced-store/src/s3/store.ts",
      "page.md:3: `Calls.put` is not declared in packages/fenced-store/src/postgres/calls.ts",
    ]);
  });

  it("reads declarations at any depth, members with their class, and not names that are only used", () => {
    const names = declaredNames(
      [
        "export class A { private b(): void { const inner = 1; void inner; } static c = 2; #d() {} }",
        "interface I { readonly e: string; f(): void }",
        "function g() { const h = (x: number) => x; return h(1); }",
        "type T = number; enum E { X }",
        "g(); new A();",
      ].join("\n"),
      "x.ts",
    );
    for (const name of ["A", "A.b", "b", "A.c", "A.#d", "inner", "I", "I.e", "I.f", "g", "h", "T", "E"])
      expect(names, name).toContain(name);
    expect(names).not.toContain("x");
    expect(names).not.toContain("A.inner");
  });
});
