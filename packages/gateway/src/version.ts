import { readFileSync } from "node:fs";

/**
 * The gateway's version, as its package.json says: what `--version` prints and
 * `fenced_gateway_build_info` carries. Read once, at load, from the package's own package.json,
 * which is one folder above this module both in the sources (src/) and in the build (dist/), and
 * which every install of the package holds (version.test.ts checks both layouts).
 */
const MANIFEST = readManifest(new URL("../package.json", import.meta.url));
export const GATEWAY_VERSION: string = MANIFEST?.version ?? "unknown";
/** The Node.js versions the package supports, as its `engines` says ("^22.12 || ^24 || ^26"); undefined where unknown. */
export const SUPPORTED_NODE: string | undefined = MANIFEST?.engines.node;

function readManifest(file: URL): { version: string; engines: { node?: string } } | undefined {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    // Bundled into an application, the module has no package.json beside it: the gateway still runs.
    if ((err as { code?: unknown }).code === "ENOENT") return undefined;
    throw err;
  }
  const { version, engines } = JSON.parse(text) as { version?: unknown; engines?: { node?: unknown } };
  if (typeof version !== "string") throw new Error(`${file.pathname} has no version`);
  return { version, engines: typeof engines?.node === "string" ? { node: engines.node } : {} };
}

/**
 * Whether Node.js `version` ("v20.19.0") is in `range`, written as `engines` writes it here: caret
 * ranges of a major (and a least minor) joined by `||` ("^22.12 || ^24"). A range of another form
 * answers true: the gateway warns only when it is sure.
 */
export function nodeSupported(version: string, range: string): boolean {
  const [major = NaN, minor = NaN] = version.replace(/^v/, "").split(".").map(Number);
  const alternatives = range.split("||").map((a) => /^\s*\^(\d+)(?:\.(\d+))?(?:\.\d+)?\s*$/.exec(a));
  if (alternatives.some((a) => a === null)) return true;
  return alternatives.some((a) => Number(a?.[1]) === major && minor >= Number(a?.[2] ?? 0));
}
