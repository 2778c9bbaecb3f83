// bench/gateway-layers.ts takes each layer out of the built gateway by a textual patch of its
// JavaScript, which must find its text exactly once. A patch whose code moved would otherwise fail
// only when `pnpm bench gateway` runs; here each is checked against the gateway's sources as the
// build emits them (transpiled to the base tsconfig's target as ES modules, as the package's
// "type": "module" makes NodeNext emit them).
import { readFileSync } from "node:fs";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { LAYERS, occurrences } from "../../bench/gateway-layers.js";

const SRC = new URL("../../packages/gateway/src/", import.meta.url);

/** The JavaScript the build emits for `file` (a path under dist/, as the patches name it). */
function emitted(file: string): string {
  const source = readFileSync(new URL(file.replace(/\.js$/, ".ts"), SRC), "utf8");
  return ts.transpileModule(source, {
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, verbatimModuleSyntax: true },
  }).outputText;
}

describe("the gateway's layers, as bench/gateway-layers.ts patches them out", () => {
  for (const layer of LAYERS)
    for (const patch of layer.patches)
      it(`${layer.name}: dist/${patch.file} holds ${String(patch.find).slice(0, 60)} once`, () => {
        expect(occurrences(emitted(patch.file), patch.find)).toBe(1);
      });
});
