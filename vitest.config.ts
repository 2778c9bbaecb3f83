import { relative } from "node:path";
import { defineConfig } from "vitest/config";
import { BaseSequencer, type TestSpecification } from "vitest/node";

// Workspace packages export their TypeScript sources under the "source" condition,
// so tests run against src/ without a build step.
// No "import" condition: vitest hands these to Node as --conditions, which also apply to require(),
// and CommonJS packages (pg requiring pg-pool) would then load the ESM build of their dependencies.
// No "module" condition either: it is a bundler convention, and Node given it loads the AWS SDK's
// dist-es build, whose extensionless relative imports Node cannot resolve.

/**
 * The files that run a whole system for minutes each (the tarballs built and installed, the SPIN
 * model check, the chaos runs, the demo): 60–280 s apiece on two cores, where the median file takes
 * 4 s. Vitest starts the longest files first when it has their last durations (node_modules/.vite),
 * but a clean clone has none, and then it goes by size: the chaos files, among the smallest, came
 * late, where a file of minutes can leave one worker running it alone at the end. These start first
 * instead (in vitest's order among themselves).
 */
const LONG_RUNS = ["test/release/", "test/spec/", "packages/chaos/src/chaos", "packages/demo/src/demo.test.ts"];

class LongRunsFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const isLong = (file: TestSpecification): boolean =>
      LONG_RUNS.some((prefix) => relative(file.project.config.root, file.moduleId).startsWith(prefix));
    return [...sorted.filter(isLong), ...sorted.filter((file) => !isLong(file))];
  }
}

export default defineConfig({
  resolve: { conditions: ["source", "node", "default"] },
  ssr: { resolve: { conditions: ["source", "node", "default"] } },
  test: {
    include: ["packages/*/src/**/*.test.ts", "test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    // Three files at once, even on two cores (vitest's default would be one there): most of a test's
    // time is spent waiting on its real servers and processes, not computing. packages/fenced-store's
    // 78 files on 2 cores: 251 s with two at once (the machine busy 78 % of the time), 210 s with three
    // (94 %). scripts/loaded-test.sh keeps two, beside its hogs.
    maxWorkers: 3,
    sequence: { sequencer: LongRunsFirst },
    reporters: process.env.CI ? ["default"] : ["default"],
  },
});
