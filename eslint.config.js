import js from "@eslint/js";
import { createTypeScriptImportResolver } from "eslint-import-resolver-typescript";
import { importX } from "eslint-plugin-import-x";
import tseslint from "typescript-eslint";

export default tseslint.config(
  // test/openapi-client/client: type-checked by its test against the api.ts it generates (absent here).
  { ignores: ["**/*.tmp.ts", "**/dist/**", "**/node_modules/**", ".cache/**", "demo-output/**", "test/openapi-client/client/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: { allowDefaultProject: ["*.js"] }, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/only-throw-error": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
    },
  },
  { files: ["**/*.js"], ...tseslint.configs.disableTypeChecked },
  {
    // No import cycles: a module is fully initialised before anything that imports it runs. Imports
    // resolve as TypeScript resolves them ("./x.js" is ./x.ts). Type-only imports are not followed.
    plugins: { "import-x": importX },
    settings: {
      "import-x/parsers": { "@typescript-eslint/parser": [".ts"] },
      "import-x/resolver-next": [createTypeScriptImportResolver({ project: "./tsconfig.json" })],
    },
    rules: { "import-x/no-cycle": ["error", { ignoreExternal: true }] },
  },
  {
    // The gateway's folders are layers, each importing only from those below it (src/LAYOUT.md), so
    // that a layer can be read, and replaced, without the ones above it. Tests may reach anywhere.
    files: ["packages/gateway/src/**/*.ts"],
    ignores: ["**/*.test.ts", "**/*test-support.ts"],
    plugins: { "import-x": importX },
    // basePath: the zones are the repository's paths, wherever eslint runs from (an editor in a package).
    rules: { "import-x/no-restricted-paths": ["error", { basePath: import.meta.dirname, zones: gatewayLayers() }] },
  },
  {
    // A store's SDK is tens of MB of code: the gateway loads it only through that store's driver
    // (stores/<store>-driver.ts), which its registration's load() imports when the store is served
    // or swept, and stores/drivers.ts (every driver) for index.ts's createGateway. Types may come from
    // anywhere, in an `import type` (an `import { type X }` still loads its module).
    files: ["packages/gateway/src/**/*.ts"],
    ignores: [
      "**/*.test.ts",
      "**/*test-support.ts",
      "packages/gateway/src/stores/*-driver.ts",
      "packages/gateway/src/stores/drivers.ts",
      "packages/gateway/src/index.ts",
    ],
    rules: {
      "@typescript-eslint/no-import-type-side-effects": "error",
      "@typescript-eslint/no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              regex:
                "^(@aws-sdk/|@azure/|@smithy/|pg$|pg-|@fenced/store/(postgres|s3|dynamodb|azure-blob)$|.*/[a-z-]+-driver\\.js$|.*/drivers\\.js$)",
              allowTypeImports: true,
              message:
                "load a store's SDK only in its driver (stores/<store>-driver.ts), and a driver only through its registration's load(); import types with `import type`",
            },
          ],
        },
      ],
    },
  },
  {
    // Every import declared by the package that makes it (its nearest package.json): a package's
    // tests (and test/, all of it tests) may use its devDependencies, its sources only what a user's install brings.
    files: ["packages/**/*.ts", "test/**/*.ts"],
    plugins: { "import-x": importX },
    rules: {
      "import-x/no-extraneous-dependencies": [
        "error",
        { devDependencies: ["**/*.test.ts", "**/*test-support.ts", "**/*.tmp.ts", "test/**"], includeTypes: true },
      ],
    },
  },
);

/**
 * One zone per layer of the gateway, bottom first (src/LAYOUT.md): nothing in a layer imports a layer
 * above it, or the files at src/'s top (version.ts aside, which names the package's version).
 */
function gatewayLayers() {
  const src = "./packages/gateway/src";
  const layers = ["vocabulary", "stores", "problems", "auth", "schemas", "http", "admission", "ops", "routes", "openapi"];
  return layers.map((layer, i) => ({
    target: `${src}/${layer}`,
    from: [...layers.slice(i + 1).map((above) => `${src}/${above}/**`), `${src}/!(version).ts`],
    message: `${layer}/ is below ${layers.slice(i + 1).join(", ")} and src/'s top files: move what it needs down, or it up (src/LAYOUT.md)`,
  }));
}
