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
