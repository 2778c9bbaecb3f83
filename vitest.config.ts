import { defineConfig } from "vitest/config";

// Workspace packages export their TypeScript sources under the "source" condition,
// so tests run against src/ without a build step.
// No "import" condition: vitest hands these to Node as --conditions, which also apply to require(),
// and CommonJS packages (pg requiring pg-pool) would then load the ESM build of their dependencies.
// No "module" condition either: it is a bundler convention, and Node given it loads the AWS SDK's
// dist-es build, whose extensionless relative imports Node cannot resolve.
export default defineConfig({
  resolve: { conditions: ["source", "node", "default"] },
  ssr: { resolve: { conditions: ["source", "node", "default"] } },
  test: {
    include: ["packages/*/src/**/*.test.ts", "test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    // Two files at once, even on two cores (vitest's default would be one there): most of a test's
    // time is spent waiting on its real servers and processes, not computing. 336 s for the suite
    // on 2 cores, against ~560 s one file at a time.
    maxWorkers: 2,
    reporters: process.env.CI ? ["default"] : ["default"],
  },
});
