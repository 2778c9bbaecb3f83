import { readFileSync } from "node:fs";

/**
 * The gateway's version, as its package.json says: what `--version` prints and
 * `fenced_gateway_build_info` carries. Read once, at load, from the package's own package.json,
 * which is one folder above this module both in the sources (src/) and in the build (dist/), and
 * which every install of the package holds (version.test.ts checks both layouts).
 */
export const GATEWAY_VERSION: string = readVersion(new URL("../package.json", import.meta.url));

function readVersion(file: URL): string {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    // Bundled into an application, the module has no package.json beside it: the gateway still runs.
    if ((err as { code?: unknown }).code === "ENOENT") return "unknown";
    throw err;
  }
  const { version } = JSON.parse(text) as { version?: unknown };
  if (typeof version !== "string") throw new Error(`${file.pathname} has no version`);
  return version;
}
