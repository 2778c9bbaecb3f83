import { defineConfig } from "vitest/config";

// Workspace packages export their TypeScript sources under the "source" condition,
// so tests run against src/ without a build step.
export default defineConfig({
  resolve: { conditions: ["source", "module", "node", "import", "default"] },
  ssr: { resolve: { conditions: ["source", "module", "node", "import", "default"] } },
  test: {
    include: ["packages/*/src/**/*.test.ts", "test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    reporters: process.env.CI ? ["default"] : ["default"],
  },
});
