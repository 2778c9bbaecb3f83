// Runs every bench/*.bench.ts in its own process, one after another, so that one benchmark's
// servers, heap and sockets never distort another's figures. Each prints JSON lines on stdout.
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
let failed = 0;
for (const file of files) {
  const result = spawnSync(process.execPath, ["--conditions=source", "--import", "tsx", "--expose-gc", join(here, file)], {
    stdio: ["ignore", "inherit", "inherit"],
  });
  if (result.status !== 0) {
    failed++;
    process.stderr.write(`benchmark ${file} failed with ${String(result.status ?? result.signal)}\n`);
  }
}
process.exit(failed === 0 ? 0 : 1);
