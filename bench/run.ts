// Runs every bench/*.bench.ts in its own process, one after another, so that one benchmark's
// servers, heap and sockets never distort another's figures. Each prints JSON lines on stdout.
// The packages are measured as users run them: built (`pnpm build`) and imported from dist/, the
// same JavaScript the peers ship, not through a TypeScript loader (whose per-closure helpers would
// be counted against this project alone). Only the benchmark files themselves go through tsx.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const only = process.argv.slice(2);
const files = readdirSync(here)
  .filter((f) => f.endsWith(".bench.ts"))
  .filter((f) => only.length === 0 || only.some((o) => f.includes(o)))
  .sort();
const built = spawnSync("pnpm", ["build"], { stdio: ["ignore", "ignore", "inherit"] });
if (built.status !== 0) {
  process.stderr.write("pnpm build failed: the benchmarks measure the built packages\n");
  process.exit(1);
}
let failed = 0;
for (const file of files) {
  const result = spawnSync(process.execPath, ["--import", "tsx", "--expose-gc", join(here, file)], {
    stdio: ["ignore", "inherit", "inherit"],
  });
  if (result.status !== 0) {
    failed++;
    process.stderr.write(`benchmark ${file} failed with ${String(result.status ?? result.signal)}\n`);
  }
}
process.exit(failed === 0 ? 0 : 1);
