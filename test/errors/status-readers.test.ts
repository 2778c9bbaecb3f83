// HTTP statuses are the gateway's (its problem table maps each error code to its answer): no code of
// ours reads the deprecated `status` of a store error. Checked with the type checker over every
// source and test file of the packages, so a read through any alias, destructuring or subclass counts.
import { fileURLToPath } from "node:url";
import { dirname, join, relative } from "node:path";
import { globSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const ERRORS = join(ROOT, "packages/fenced-store/src/errors.ts");
/** The getters' own test, which reads each one on purpose. */
const GETTERS_TEST = join(ROOT, "packages/gateway/src/errors.test.ts");

/** Whether `symbol` is a `status` declared on a store error class (errors.ts). */
function isStoreStatus(symbol: ts.Symbol | undefined): boolean {
  return (symbol?.declarations ?? []).some((d) => d.getSourceFile().fileName === ERRORS && ts.isClassLike(d.parent));
}

/** Every read of a store error's `status` in `files`: `file:line` each. */
function statusReads(files: readonly string[]): string[] {
  const config: unknown = ts.readConfigFile(join(ROOT, "tsconfig.base.json"), (f) => ts.sys.readFile(f)).config;
  const { options } = ts.parseJsonConfigFileContent(config, ts.sys, ROOT);
  const program = ts.createProgram(files, { ...options, noEmit: true });
  const checker = program.getTypeChecker();
  const found: string[] = [];
  for (const source of program.getSourceFiles()) {
    if (!files.includes(source.fileName) || source.fileName === ERRORS || source.fileName === GETTERS_TEST) continue;
    const visit = (node: ts.Node): void => {
      let symbol: ts.Symbol | undefined;
      if ((ts.isPropertyAccessExpression(node) || ts.isElementAccessExpression(node)) && /status/.test(node.getText(source)))
        symbol = checker.getSymbolAtLocation(ts.isPropertyAccessExpression(node) ? node.name : node.argumentExpression);
      else if (ts.isBindingElement(node) && ts.isObjectBindingPattern(node.parent))
        symbol = checker.getTypeAtLocation(node.parent).getProperty((node.propertyName ?? node.name).getText(source));
      if (isStoreStatus(symbol)) {
        const { line } = source.getLineAndCharacterOfPosition(node.getStart(source));
        found.push(`${relative(ROOT, source.fileName)}:${line + 1}`);
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return found;
}

describe("the deprecated status of store errors", () => {
  it("is read nowhere in the packages' sources and tests but its own test", () => {
    const files = globSync("packages/*/src/**/*.ts", { cwd: ROOT }).map((f) => join(ROOT, f));
    expect(statusReads(files)).toEqual([]);
  }, 60_000);

  it("a read is found, through a property, an element access, a destructuring and a subclass", () => {
    const dir = mkdtempSync(join(tmpdir(), "status-probe-"));
    const probe = join(dir, "probe.ts");
    ts.sys.writeFile(
      probe,
      [
        `import { StaleTokenError, StoreSetupError } from ${JSON.stringify(ERRORS.replace(/\.ts$/, ".js"))};`,
        "class Mine extends StaleTokenError {}",
        "export const a = (e: StaleTokenError) => e.status;",
        'export const b = (e: StoreSetupError) => e["status"];',
        "export const c = ({ status }: Mine) => status;",
        "export const d = (e: { status: number }) => e.status;",
      ].join("\n"),
    );
    try {
      expect(statusReads([probe]).map((at) => at.split(":")[1])).toEqual(["3", "4", "5"]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
