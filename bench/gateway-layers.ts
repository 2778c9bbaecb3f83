// The layers of a credential write through the gateway, each taken out of a copy of the built
// gateway (packages/gateway/dist) by a textual patch of its JavaScript: what each layer costs is the
// CPU per write the full build spends beyond that copy, in the same interleaved rounds, each server
// under the same CPU quota (gateway-layers.bench.ts). A patch that no longer finds its text fails the
// benchmark: a layer whose code moved is measured again, never silently not at all.
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** One textual edit of one compiled file of the gateway: `find` must occur exactly once. */
interface Patch {
  readonly file: string;
  readonly find: string | RegExp;
  readonly replace: string;
}

export interface Layer {
  readonly name: string;
  /** What is taken out, for the table. */
  readonly removed: string;
  readonly patches: readonly Patch[];
  /** fenced-gateway flags that take it out instead, or beside the patches. */
  readonly flags?: readonly string[];
}

/** The layers the issue names, in a write's order; `route` (express's router and app) has no removal. */
export const LAYERS: readonly Layer[] = [
  {
    name: "auth",
    removed: "the API key's SHA-256 and its lookup (the principal is looked up by the header's text)",
    patches: [
      {
        file: "auth/api-keys.js",
        find: "const principal = presented === undefined ? undefined : this.#byDigest.get(sha256(presented));",
        replace:
          "const remembered = (globalThis.__layerAuth ??= new Map()).get(header); const principal = remembered ?? (presented === undefined ? undefined : this.#byDigest.get(sha256(presented))); if (remembered === undefined && principal !== undefined) globalThis.__layerAuth.set(header, principal);",
      },
    ],
  },
  {
    name: "credential",
    removed: "the Fencing-Credential's verification (HMAC, expiry, parse): each credential's fence is verified once and then looked up",
    patches: [
      {
        file: "routes/access.js",
        find: "return ctx.credentials.verify(credential);",
        replace:
          "const known = (globalThis.__layerCred ??= new Map()).get(credential); if (known !== undefined) return known; const fence = ctx.credentials.verify(credential); globalThis.__layerCred.set(credential, fence); return fence;",
      },
    ],
  },
  { name: "admission", removed: "admission control (--no-admission)", patches: [], flags: ["--no-admission"] },
  {
    name: "scope",
    removed: "the request scope: request id, AsyncLocalStorage, the request's span (and so the span's cost too)",
    patches: [{ file: "app.js", find: "app.use(scopeRequest(routeOf));", replace: "app.use((_req, _res, next) => next());" }],
  },
  {
    name: "span",
    removed: "the request's OpenTelemetry span (no SDK registered: the no-op tracer's span and context)",
    patches: [
      {
        file: "http/request-scope.js",
        find: /const parent = propagation\.extract\(ROOT_CONTEXT, req\.headers\);[\s\S]*?locals\.span = span;/,
        replace: "",
      },
      {
        file: "http/request-scope.js",
        find: "scopes.run(scope, () => context.with(trace.setSpan(parent, span), next));",
        replace: "scopes.run(scope, next);",
      },
    ],
  },
  {
    name: "metrics",
    removed: "the write's metrics: its store-call histogram, the request histogram and the accepted/rejected counters",
    patches: [
      {
        file: "routes/records.js",
        find: 'await ctx.metrics.time("records", "put", () => store.put(key, value, options));',
        replace: "await store.put(key, value, options);",
      },
      { file: "outcomes.js", find: "ctx.metrics.request(route, req.method, status, ms / 1000);", replace: "" },
      { file: "outcomes.js", find: "if (a.write !== undefined) {", replace: "if (false) {" },
    ],
  },
  {
    name: "validation",
    removed: "the body's checks (media type, size limit, UTF-8, body-parser): a bare read and JSON.parse",
    patches: [
      {
        file: "routes/records.js",
        find: "const value = await readBody(req, res);",
        replace:
          'const value = JSON.parse(await new Promise((resolve, reject) => { let text = ""; req.setEncoding("utf8"); req.on("data", (c) => (text += c)); req.on("end", () => resolve(text)); req.on("error", reject); }));',
      },
    ],
  },
  {
    name: "store",
    removed: "the store's put (FencedPostgres: its checks, the statement, pg's client): answered as if written",
    patches: [
      {
        file: "routes/records.js",
        find: "() => store.put(key, value, options)",
        replace: '() => Promise.resolve({ version: "1", token: options.fence.token })',
      },
    ],
  },
  {
    name: "answer",
    removed: "the answer: accepted mark, ETag and Fencing-Token headers, the JSON body (an empty 200 instead)",
    patches: [{ file: "routes/records.js", find: "answerWrite(res, result, 200);", replace: "res.statusCode = 200; res.end();" }],
  },
];

const GATEWAY = fileURLToPath(new URL("../packages/gateway/", import.meta.url));

/** How often `find` occurs in `text` (a patch must find its text once). */
export function occurrences(text: string, find: string | RegExp): number {
  if (typeof find === "string") return text.split(find).length - 1;
  return [...text.matchAll(new RegExp(find.source, `${find.flags.replace("g", "")}g`))].length;
}

/**
 * A copy of the built gateway with `layer` taken out, in a scratch folder: its dist/ and package.json
 * (the version is read from it), and node_modules linked to the gateway's own, so that it loads the
 * same dependencies. Returns the folder (for its removal) and the path of its cli.js.
 */
export function gatewayWithout(layer: Layer): { dir: string; cli: string } {
  const dir = mkdtempSync(join(tmpdir(), `fenced-layer-${layer.name}-`));
  cpSync(join(GATEWAY, "dist"), join(dir, "dist"), { recursive: true });
  cpSync(join(GATEWAY, "package.json"), join(dir, "package.json"));
  symlinkSync(join(GATEWAY, "node_modules"), join(dir, "node_modules"), "dir");
  try {
    for (const patch of layer.patches) {
      const file = join(dir, "dist", patch.file);
      const text = readFileSync(file, "utf8");
      const found = occurrences(text, patch.find);
      if (found !== 1) throw new Error(`layer ${layer.name}: ${String(patch.find)} occurs ${found} times in dist/${patch.file}, not once`);
      writeFileSync(
        file,
        text.replace(patch.find, () => patch.replace),
      );
    }
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return { dir, cli: join(dir, "dist", "cli.js") };
}
