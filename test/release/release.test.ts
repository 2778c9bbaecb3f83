// The packages as a user gets them, and the README as a user reads it. One file, run in order: `pnpm
// pack` (each package's prepack rebuilds its dist/ from clean) and the README's `pnpm build` both write
// the packages' dist/ directories, so they must not run side by side.
import { existsSync, lstatSync, readdirSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  startDynamo,
  startAzureBlob,
  startPostgres,
  startRedisNodes,
  startS3,
  type RedisNodes,
  type StartedDynamo,
  type StartedAzureBlob,
  type StartedPostgres,
  type StartedS3,
} from "@fenced/servers";
import type { ConsumerReport } from "./consumer.js";
import { checkAndRun, installAlone, LONE_CLIENTS, packageOf, type LoneClient } from "./clients-alone.js";
import { CHECKS, cleanEnv, installConsumer, typeCheck, writeChecks, type CheckResult } from "./consumer-project.js";
import { run, runOk } from "./exec.js";
import { FIRST_EXAMPLE_HEADING, runFirstExample } from "./first-example.js";
import { healthz, startGateway, withTestValues, type GatewayBackends } from "./gateway-bin.js";
import {
  ambientDeclarations,
  codeBlocks,
  firstBlockAfter,
  installs,
  mapErrors,
  npmInstalls,
  pnpmScripts,
  redisClientsWithoutErrorListener,
  relativeLinks,
  repositoryPaths,
  shellCommands,
  tarballName,
  writeBlocks,
  type CodeBlock,
} from "./readme.js";
import {
  closure,
  exportConditions,
  formatTarball,
  GATEWAY_OPS_FILES,
  manifestStrings,
  type Manifest,
  packAll,
  PUBLIC_PACKAGES,
  ROOT,
  unreached,
  type Tarball,
} from "./tarballs.js";

const started = performance.now();

/**
 * FENCED_RELEASE_LINE_ONLY=1: only what can differ between Node lines — installing, loading and
 * running the tarballs, the bins — while the checks that run the same compiler on the same files
 * whatever the line (a fresh `pnpm build`, the README's blocks) and the lock's one-client projects
 * (every client runs on every line in clients.test.ts) are skipped, each saying so. .ci/run sets it
 * on the lines after the one that ran them all.
 */
const LINE_ONLY = process.env.FENCED_RELEASE_LINE_ONLY === "1";
if (LINE_ONLY) console.log("FENCED_RELEASE_LINE_ONLY=1: the checks that do not depend on the Node line are skipped on this run");

/** Whether an installed package carries its own declarations. */
function shipsTypes(dir: string): boolean {
  const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as Record<string, unknown>;
  return (
    manifest.types !== undefined ||
    manifest.typings !== undefined ||
    JSON.stringify(manifest.exports ?? {}).includes('"types"') ||
    existsSync(join(dir, "index.d.ts"))
  );
}
const elapsed = (): string => `${((performance.now() - started) / 1000).toFixed(1)} s`;
/** The README, the pages it moved detail to (docs/), and each package's README: their code and commands are checked alike. */
const READMES = [
  "README.md",
  ...readdirSync(join(ROOT, "docs"))
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`),
  ...PUBLIC_PACKAGES.map((p) => `${p.dir}/README.md`),
];
const WORKSPACE_TSC = join(ROOT, "node_modules", "typescript", "bin", "tsc");
/** Which peer dependencies a package can do without. */
type PeersMeta = { readonly peerDependenciesMeta?: Record<string, { optional?: boolean }> };

let work: string;
let redis: RedisNodes;
let postgres: StartedPostgres;
let s3: StartedS3;
let dynamo: StartedDynamo;
/** The DynamoDB table the consumer's FencedDynamo writes (partition key `key`, a String). */
let table: string;
let azure: StartedAzureBlob;
/** The Azure Blob container the consumer's FencedAzureBlob writes. */
let container: string;
let backends: GatewayBackends;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "fenced-release-"));
  [redis, postgres, s3, dynamo, azure] = await Promise.all([
    startRedisNodes(3),
    startPostgres(),
    startS3(),
    startDynamo(),
    startAzureBlob(),
  ]);
  const bucket = await s3.createBucket();
  table = await dynamo.createTable();
  container = await azure.createContainer();

  backends = {
    redisUrls: redis.urls,
    postgresUrl: postgres.url,
    s3: { endpoint: s3.endpoint, region: s3.region, accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey, bucket },
  };
  console.log(`servers up after ${elapsed()}: redis ${redis.source}, postgres ${postgres.source}, s3 ${s3.source}`);
}, 120_000);

afterAll(async () => {
  await Promise.all([redis?.stop(), postgres?.stop(), s3?.stop(), dynamo?.stop(), azure?.stop()]);
  if (work !== undefined) await rm(work, { recursive: true, force: true });
  console.log(`release tests done after ${elapsed()}`);
});

/**
 * The last line of a program's stdout that has its answer's shape: a client may log on the same
 * stdout (GLIDE's core warned there of a reply that took 129 ms, a line before a token).
 */
const answerLine = (stdout: string | undefined, shape: RegExp): string =>
  (stdout ?? "")
    .split("\n")
    .filter((line) => shape.test(line))
    .pop() ?? "";

describe("installed from the packed tarballs, like a user", () => {
  let tarballs: Tarball[];
  let project: string;
  const STALE = `stale-${process.pid}.js`;

  beforeAll(async () => {
    // A file left in dist/ by an earlier build: prepack must start from a clean dist, so it must not ship.
    for (const pkg of PUBLIC_PACKAGES) {
      await mkdir(join(ROOT, pkg.dir, "dist"), { recursive: true });
      await writeFile(join(ROOT, pkg.dir, "dist", STALE), "export {};\n");
    }
    try {
      tarballs = await packAll(join(work, "tarballs"));
    } finally {
      // A pack that failed before its prepack cleaned dist/ would leave the marker behind.
      for (const pkg of PUBLIC_PACKAGES) await rm(join(ROOT, pkg.dir, "dist", STALE), { force: true });
    }
    console.log(`packed after ${elapsed()}\n${tarballs.map(formatTarball).join("\n")}`);
    project = join(work, "consumer");
    const installed = await installConsumer(project, tarballs);
    console.log(`npm install: ${installed.ms} ms (${elapsed()})`);
  }, 420_000);

  it("each tarball ships exactly what its exports, bin and source maps reach, with a publishable manifest", async () => {
    const license = await readFile(join(ROOT, "LICENSE"), "utf8");
    const versions = new Map<string, string>(
      PUBLIC_PACKAGES.map((p) => [
        p.name,
        (JSON.parse(readFileSync(join(ROOT, p.dir, "package.json"), "utf8")) as { version: string }).version,
      ]),
    );
    for (const t of tarballs) {
      const paths = t.files.map((f) => f.path);
      expect.soft(paths, t.name).not.toContain(`dist/${STALE}`);
      expect.soft(closure(t).missing, `${t.name}: referenced but not shipped`).toEqual([]);
      expect.soft(unreached(t), `${t.name}: shipped but reached by nothing`).toEqual([]);
      expect
        .soft(
          // The alert rules' promtool unit test is for operators: it ships in ops/.
          paths.filter((p) => /\.test\.|test-support/.test(p) && !p.startsWith("ops/")),
          t.name,
        )
        .toEqual([]);
      expect.soft(paths, t.name).toEqual(expect.arrayContaining(["package.json", "README.md", "LICENSE"]));
      expect.soft(readFileSync(join(t.unpacked, "package", "LICENSE"), "utf8"), t.name).toBe(license);

      const m = t.manifest;
      expect
        .soft(
          manifestStrings(m).filter((s) => s.value.startsWith("workspace:")),
          t.name,
        )
        .toEqual([]);
      for (const [dep, range] of Object.entries({ ...m.dependencies, ...m.peerDependencies })) {
        if (versions.has(dep)) expect.soft(range, `${t.name} → ${dep}`).toBe(versions.get(dep));
      }
      // "source" points at TypeScript for this workspace's tools; a user's tools must never pick it.
      // Every other condition of every subpath is published as the workspace has it (publishConfig.exports).
      const workspaceExports = (
        JSON.parse(readFileSync(join(ROOT, PUBLIC_PACKAGES.find((p) => p.name === t.name)?.dir ?? "", "package.json"), "utf8")) as {
          exports: Record<string, Record<string, string>>;
        }
      ).exports;
      const withoutSource = Object.fromEntries(
        Object.entries(workspaceExports).map(([subpath, conditions]) => [
          subpath,
          Object.fromEntries(Object.entries(conditions).filter(([c]) => c !== "source")),
        ]),
      );
      expect.soft(m.exports, `${t.name}: published exports`).toEqual(withoutSource);
      expect.soft(exportConditions(m), t.name).not.toContain("source");
      expect.soft(new Set(exportConditions(m)), t.name).toEqual(new Set(["types", "default"]));
      expect.soft(m.private, t.name).toBeUndefined();
      expect.soft(m.license, t.name).toBe("MIT");
      expect.soft(m.engines, t.name).toEqual({ node: "^22.12 || ^24 || ^26" });
      for (const field of ["description", "keywords"]) expect.soft(m[field], `${t.name}.${field}`).toBeTruthy();
    }
  });

  it("the gateway's tarball carries its files for operators (ops/), as the systemd unit's install steps use them", () => {
    const gateway = tarballs.find((t) => t.name === "@fenced/gateway");
    const ops = readdirSync(join(ROOT, "packages", "gateway", "ops")).map((f) => `ops/${f}`);
    expect(ops.sort()).toEqual([...GATEWAY_OPS_FILES].sort());
    expect(
      gateway?.files
        .map((f) => f.path)
        .filter((p) => p.startsWith("ops/"))
        .sort(),
    ).toEqual([...GATEWAY_OPS_FILES].sort());
    for (const path of GATEWAY_OPS_FILES)
      expect(readFileSync(join(gateway?.unpacked ?? "", "package", path), "utf8"), path).toBe(
        readFileSync(join(ROOT, "packages", "gateway", path), "utf8"),
      );
  });

  it("every package a tarball's code or declarations import is one it depends on, with its types", () => {
    for (const t of tarballs) {
      const { dependencies = {}, peerDependencies = {} } = t.manifest;
      const declared = new Set([...Object.keys(dependencies), ...Object.keys(peerDependencies)]);
      const { runtimeImports, typeImports } = closure(t);
      for (const name of runtimeImports) expect.soft(declared, `${t.name} imports ${name}`).toContain(name);
      for (const name of typeImports) {
        expect.soft(declared, `${t.name}'s declarations import ${name}`).toContain(name);
        // A dependency (not a peer the user brings) whose package has no types needs its @types package beside it.
        if (name in dependencies && !shipsTypes(join(project, "node_modules", name))) {
          expect
            .soft(Object.keys(dependencies), `${t.name}'s declarations import ${name}, which has no types of its own`)
            .toContain(`@types/${name}`);
        }
      }
    }
  });

  it("@fenced/store's root needs neither backend client, and each backend's subpath needs only its own", () => {
    const store = tarballs.find((t) => t.name === "@fenced/store");
    if (store === undefined) throw new Error("no @fenced/store tarball");
    const loads = (subpath: string): Set<string> => {
      const conditions = store.manifest.exports?.[subpath] ?? {};
      const runtime = closure(store, [conditions.default ?? ""]).runtimeImports;
      const types = closure(store, [conditions.types ?? ""]).typeImports;
      return new Set([...runtime, ...types]);
    };
    expect(loads(".")).not.toContain("pg");
    expect(loads(".")).not.toContain("@aws-sdk/client-s3");
    expect(loads("./postgres")).not.toContain("@aws-sdk/client-s3");
    expect(loads("./s3")).not.toContain("pg");
    expect(loads("./s3")).not.toContain("@aws-sdk/client-dynamodb");
    expect(loads("./dynamodb")).not.toContain("pg");
    expect(loads("./dynamodb")).not.toContain("@aws-sdk/client-s3");
    expect(loads(".")).not.toContain("@aws-sdk/client-dynamodb");
    expect(loads("./postgres")).not.toContain("@aws-sdk/client-dynamodb");
    for (const subpath of [".", "./postgres", "./s3", "./dynamodb"]) expect(loads(subpath), subpath).not.toContain("@azure/storage-blob");
    for (const other of ["pg", "@aws-sdk/client-s3", "@aws-sdk/client-dynamodb"]) expect(loads("./azure-blob"), other).not.toContain(other);
    // What the gateway takes from the store on every path, so that its bin loads an SDK only with the store that needs it.
    const internal = closure(store, [store.manifest.exports?.["./internal"]?.default ?? ""]).runtimeImports;
    for (const sdk of ["pg", "@aws-sdk/client-s3", "@aws-sdk/client-dynamodb", "@azure/storage-blob"])
      expect(internal, sdk).not.toContain(sdk);
  });

  it("the gateway's bin loads no store's SDK until its configuration names that store", () => {
    const gateway = tarballs.find((t) => t.name === "@fenced/gateway");
    if (gateway === undefined) throw new Error("no @fenced/gateway tarball");
    // What the bin loads as it starts; each store's driver, and with it the SDK, comes by import() when configured.
    const { runtimeSpecifiers } = closure(gateway, Object.values(gateway.manifest.bin ?? {}), { dynamic: false });
    const sdks = [...runtimeSpecifiers].filter((s) =>
      /^(@aws-sdk\/|@azure\/|@smithy\/|pg$|pg-|@fenced\/store\/(postgres|s3|dynamodb|azure-blob)$)/.test(s),
    );
    expect(sdks).toEqual([]);
    // And the drivers are there to be loaded: the whole closure, import() followed, reaches each.
    const reached = closure(gateway).reached;
    for (const driver of ["postgres", "s3", "dynamodb", "azure-blob"]) expect(reached, driver).toContain(`dist/stores/${driver}-driver.js`);
  });

  it("published declarations leave out every @internal member", () => {
    for (const t of tarballs) {
      for (const f of t.files.filter((file) => file.path.endsWith(".d.ts"))) {
        expect(readFileSync(join(t.unpacked, "package", f.path), "utf8"), `${t.name}/${f.path}`).not.toContain("@internal");
      }
    }
    // The source does mark members @internal: without stripInternal they would be in the declarations.
    const sources = tarballs.flatMap((t) =>
      t.files.filter((f) => f.path.endsWith(".ts") && !f.path.endsWith(".d.ts")).map((f) => join(t.unpacked, "package", f.path)),
    );
    expect(sources.filter((path) => readFileSync(path, "utf8").includes("@internal")).length).toBeGreaterThan(0);
  });

  it("the install holds copies from the tarballs, not links into the workspace", () => {
    for (const pkg of PUBLIC_PACKAGES) {
      const installed = join(project, "node_modules", pkg.name);
      expect(lstatSync(installed).isSymbolicLink(), pkg.name).toBe(false);
      expect(existsSync(join(installed, "dist", "index.js")), pkg.name).toBe(true);
    }
    const ioredis = JSON.parse(readFileSync(join(project, "node_modules", "ioredis", "package.json"), "utf8")) as { version: string };
    console.log(`the user's ioredis: ${ioredis.version}`);
    expect(Number(ioredis.version.split(".")[0])).toBeGreaterThanOrEqual(6);
  });

  it("a strict consumer type-checks under node16 and bundler (ES module) and node20 (CommonJS), with the latest TypeScript and the workspace's", async () => {
    await writeChecks(project, join(ROOT, "test", "release", "consumer.ts"));
    const latestTsc = join(project, "node_modules", "typescript", "bin", "tsc");
    const results: CheckResult[] = [];
    // The user's (latest) compiler checks every declaration file too and emits what the next test runs.
    for (const check of CHECKS) results.push(await typeCheck(project, check, latestTsc, false));
    // The workspace's compiler (the major most users are still on), on the consumer's code against the
    // same declarations; once, under node16: the resolution modes differ in what the latest one checked.
    const node16 = CHECKS.find((check) => check.name === "node16");
    if (node16 === undefined) throw new Error("no node16 check");
    results.push(await typeCheck(project, node16, WORKSPACE_TSC, true, true));
    for (const r of results)
      console.log(
        `tsc ${r.compiler} ${r.check} skipLibCheck=${r.skipLibCheck}: ${r.errors.length} errors, ${r.ms} ms${r.errors.map((e) => `\n  ${e}`).join("")}`,
      );
    for (const r of results) expect(r.errors, `${r.compiler} ${r.check}`).toEqual([]);
  }, 300_000);

  it.skipIf(LINE_ONLY)(
    "the lock type-checks strictly and leases with each client it takes as the only one installed, each major of ioredis and node-redis included",
    async () => {
      const projects = LONE_CLIENTS.map((client, i) => ({ client, dir: join(work, "alone", String(i)) }));
      const installs = await Promise.all(projects.map(({ client, dir }) => installAlone(dir, client, tarballs)));
      console.log(`npm install, ${projects.length} projects side by side: ${Math.max(...installs.map((i) => i.ms))} ms (${elapsed()})`);
      const others = (client: LoneClient): string[] =>
        [...new Set(LONE_CLIENTS.map((c) => packageOf(c.spec)))].filter((name) => name !== packageOf(client.spec));
      const tokens: bigint[] = [];
      for (const { client, dir } of projects) {
        // Alone: npm installed none of the lock's other (optional) peers.
        for (const other of others(client))
          expect(existsSync(join(dir, "node_modules", other)), `${other} beside ${client.spec}`).toBe(false);
        const { errors, ran } = await checkAndRun(dir, { REDIS_URLS: redis.urls.join(","), RESOURCE: `alone/${process.pid}` });
        console.log(
          `${client.spec} alone: ${errors.length} tsc errors${errors.map((e) => `\n  ${e}`).join("")}; ${ran === null ? "not run" : `exit ${ran.code}, ${ran.ms} ms`}`,
        );
        expect(errors, client.spec).toEqual([]);
        expect(ran?.code, `${client.spec}: ${ran?.stderr}`).toBe(0);
        tokens.push(BigInt(answerLine(ran?.stdout, /^\d+$/)));
      }
      // Each lease over the next client carries a higher token: one resource, one counter, whatever the
      // client (higher, not next: an attempt that failed on a busy machine may have used a token up).
      for (let i = 1; i < tokens.length; i++) expect(tokens[i], LONE_CLIENTS[i]?.spec).toBeGreaterThan(tokens[i - 1] as bigint);
    },
    300_000,
  );

  it.each(["esm", "cjs"] as const)(
    "runs as %s against real servers: acquire, register, put, and the stale write is refused on every store",
    async (module) => {
      const file = module === "esm" ? join(project, "out-esm", "consumer.mjs") : join(project, "out-cjs", "consumer.cjs");
      const compiled = await readFile(file, "utf8");
      // The CommonJS build really loads the ES-module packages with require().
      if (module === "cjs") expect(compiled).toMatch(/require\("@fenced\/lock"\)/);
      else expect(compiled).toMatch(/from "@fenced\/lock"/);
      const env = cleanEnv({
        CONSUMER_RUN: `r${process.pid}`,
        REDIS_URLS: backends.redisUrls.join(","),
        DATABASE_URL: backends.postgresUrl,
        S3_ENDPOINT: backends.s3.endpoint,
        S3_REGION: backends.s3.region,
        S3_ACCESS_KEY_ID: backends.s3.accessKeyId,
        S3_SECRET_ACCESS_KEY: backends.s3.secretAccessKey,
        S3_BUCKET: backends.s3.bucket,
        DYNAMODB_ENDPOINT: dynamo.endpoint,
        DYNAMODB_TABLE: table,
        AZURE_BLOB_URL: azure.url,
        AZURE_BLOB_ACCOUNT: azure.accountName,
        AZURE_BLOB_KEY: azure.accountKey,
        AZURE_BLOB_CONTAINER: container,
      });
      const ran = await run(process.execPath, [file, module], { cwd: project, env, timeoutMs: 60_000 });
      console.log(
        `${module} consumer on Node ${process.version}: exit ${ran.code}, ${ran.ms} ms${ran.stderr === "" ? "" : `, stderr:\n${ran.stderr}`}`,
      );
      expect(ran.code, ran.stderr).toBe(0);
      const report = JSON.parse(answerLine(ran.stdout, /^\{/)) as ConsumerReport;
      expect(report.module).toBe(module);
      expect(report.stores.map((s) => s.store)).toEqual(["postgres", "s3", "dynamodb", "azure-blob"]);
      for (const s of report.stores) {
        expect(BigInt(s.secondToken), s.store).toBeGreaterThan(BigInt(s.firstToken));
        expect(s.staleRefused, s.store).toBe(true);
        expect(s.refusal, s.store).toEqual({ name: "StaleTokenError", token: s.firstToken, highest: s.secondToken });
        expect(s.stored, s.store).toBe("from the second lease");
        expect(s.storedToken, s.store).toBe(s.secondToken);
      }
      expect(report.badKeyRefusedByFenceClass).toBe(true);
      expect(report.sameClassFromImport).toBe(true);
      expect(report.createGatewayIsFunction).toBe(true);
      const [firstToken = 0n] = report.clientTokens.map(BigInt);
      expect(report.clientTokens.map(BigInt)).toEqual([firstToken, firstToken + 1n, firstToken + 2n, firstToken + 3n]);
    },
    90_000,
  );

  it("runs the README's first example as written, on a fresh database: it writes, releases its lease, exits 0 and prints nothing", async () => {
    const first = await runFirstExample(project, backends);
    console.log(`${FIRST_EXAMPLE_HEADING}: tsc ${first.compiled.ms} ms, run ${first.ran?.ms} ms, exit ${first.ran?.code}`);
    expect(first.compiled.code, first.compiled.stdout + first.compiled.stderr).toBe(0);
    // Killed by the timeout (null): a connection left open keeps the program alive.
    expect(first.ran?.code, `${first.ran?.stdout}${first.ran?.stderr}`).toBe(0);
    // No warning of its own (a newer lease), no connection error printed by a client without a listener.
    expect(first.ran?.stdout).toBe("");
    expect(first.ran?.stderr).toBe("");
    expect(first.stored?.value).toEqual({ total: 120 });
    expect(first.nextToken, "orders/42 is free once the example exited").toBeDefined();
    expect(first.nextToken ?? 0n).toBeGreaterThan(first.stored?.token ?? 0n);
  }, 120_000);

  it("the installed fenced-gateway bin starts and answers /healthz", async () => {
    const bin = join(project, "node_modules", ".bin", "fenced-gateway");
    const args = withTestValues(["--redis", "", "--postgres", "", "--s3-bucket", "", "--s3-endpoint", ""], backends);
    const gateway = await startGateway(bin, args, backends, project);
    try {
      const health = await healthz(gateway.port);
      expect(health.status, JSON.stringify(health.body)).toBe(200);
      expect(health.body.checks).toMatchObject({ postgres: { ok: true }, s3: { ok: true }, redis: { ok: true } });
    } finally {
      expect(await gateway.stop()).toBe(0);
    }
  }, 90_000);
});

describe("the README (and the pages under docs/) is true", () => {
  let blocks: CodeBlock[];
  let commands: string[];

  beforeAll(() => {
    blocks = READMES.flatMap((source) => codeBlocks(ROOT, source));
    commands = shellCommands(blocks);
  });

  it.skipIf(LINE_ONLY)(
    "`pnpm build` builds every package from a fresh state, each after the packages it imports",
    async () => {
      expect(commands).toContain("pnpm build");
      const built = await runOk("pnpm", ["build"], { cwd: ROOT, env: cleanEnv(), timeoutMs: 300_000 });
      console.log(`pnpm build: ${built.ms} ms (${elapsed()})`);
      const at = (pkg: string, what: "start" | "done"): number => {
        const marker = what === "start" ? `packages/${pkg} build$` : `packages/${pkg} build: Done`;
        const index = built.stdout.indexOf(marker);
        expect(index, `${marker} in:\n${built.stdout}`).toBeGreaterThanOrEqual(0);
        return index;
      };
      for (const [before, after] of [
        ["fence", "lock"],
        ["fence", "fenced-store"],
        ["lock", "gateway"],
        ["fenced-store", "gateway"],
      ] as const) {
        expect(at(before, "done"), `${before} before ${after}`).toBeLessThan(at(after, "start"));
      }
      for (const pkg of PUBLIC_PACKAGES) {
        const manifest = JSON.parse(readFileSync(join(ROOT, pkg.dir, "package.json"), "utf8")) as {
          exports: Record<string, Record<string, string>>;
        };
        for (const conditions of Object.values(manifest.exports)) {
          for (const [condition, target] of Object.entries(conditions))
            expect(existsSync(join(ROOT, pkg.dir, target)), `${pkg.name} ${condition} → ${target}`).toBe(true);
        }
      }
    },
    300_000,
  );

  it('every ts block that makes an ioredis client gives it an "error" listener, which the lock needs to fail a down node at once', () => {
    const tsBlocks = blocks.filter((b) => b.lang === "ts" || b.lang === "typescript");
    expect(tsBlocks.filter((b) => b.code.includes("new Redis(")).length).toBeGreaterThan(3);
    expect(redisClientsWithoutErrorListener(tsBlocks)).toEqual([]);
  });

  it("the store examples handle LeaseLostError, which a write under a lease that ended throws", () => {
    for (const [source, heading] of [
      ["README.md", "## A first fenced write"],
      ["README.md", "## `@fenced/store`"],
      ["packages/fenced-store/README.md", "## Example"],
    ] as const)
      expect(firstBlockAfter(ROOT, source, heading).code, `${source}, ${heading}`).toMatch(/\binstanceof LeaseLostError\b/);
  });

  it("every ts block declares what it uses: nothing in it is `declare`d, for a reader who pastes it has no such name", () => {
    expect(ambientDeclarations(blocks.filter((b) => b.lang === "ts" || b.lang === "typescript"))).toEqual([]);
  });

  it.skipIf(LINE_ONLY)(
    "every ts block type-checks on its own against the built packages, with no names given to it",
    async () => {
      const tsBlocks = blocks.filter((b) => b.lang === "ts" || b.lang === "typescript");
      expect(tsBlocks.length).toBeGreaterThan(0);
      const dir = join(ROOT, "test", ".cache", `readme-${process.pid}`);
      try {
        const files = await writeBlocks(dir, tsBlocks);
        const ran = await run(process.execPath, [WORKSPACE_TSC, "-p", join(dir, "tsconfig.json"), "--pretty", "false"], {
          cwd: dir,
          timeoutMs: 180_000,
        });
        const errors = mapErrors(ran.stdout, files);
        console.log(
          `${tsBlocks.length} ts blocks in ${READMES.join(", ")}: ${errors.length} errors, ${ran.ms} ms${errors.map((e) => `\n  ${e}`).join("")}`,
        );
        expect(errors).toEqual([]);
        expect(ran.code, ran.stdout + ran.stderr).toBe(0);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
    180_000,
  );

  it("every pnpm script, repository path and relative link it names exists", () => {
    const scripts = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts;
    for (const script of pnpmScripts(commands)) expect(Object.keys(scripts), `pnpm ${script}`).toContain(script);
    for (const source of READMES) {
      for (const path of repositoryPaths(readFileSync(join(ROOT, source), "utf8")))
        expect(existsSync(join(ROOT, path)), `${source} names ${path}`).toBe(true);
      for (const path of relativeLinks(ROOT, source)) expect(existsSync(join(ROOT, path)), `${source} links to ${path}`).toBe(true);
    }
  });

  it("its npm install commands install every published package, from its tarball in README.md, each with the packages and peers it requires", () => {
    const rootInstalls = npmInstalls(shellCommands(blocks.filter((b) => b.source === "README.md")));
    const all = npmInstalls(commands);
    const manifests = new Map<string, Pick<Manifest, "version" | "dependencies" | "peerDependencies"> & PeersMeta>(
      PUBLIC_PACKAGES.map((p) => [p.name, JSON.parse(readFileSync(join(ROOT, p.dir, "package.json"), "utf8")) as Manifest & PeersMeta]),
    );
    const versionOf = (name: string): string => manifests.get(name)?.version ?? "";
    for (const pkg of PUBLIC_PACKAGES) {
      const manifest = manifests.get(pkg.name);
      if (manifest === undefined) throw new Error(`no manifest for ${pkg.name}`);
      if (pkg.name !== "@fenced/fence")
        expect(
          rootInstalls.some((words) => installs(words, pkg.name, manifest.version)),
          `README.md installs ${pkg.name}`,
        ).toBe(true);
      // Nothing is published: the README's own commands install the tarballs `pnpm pack` writes.
      for (const words of rootInstalls) expect(words, `README.md: ${words.join(" ")}`).not.toContain(pkg.name);
      const required = Object.keys(manifest.peerDependencies ?? {}).filter(
        (peer) => manifest.peerDependenciesMeta?.[peer]?.optional !== true,
      );
      const workspace = Object.keys(manifest.dependencies ?? {}).filter((dep) => manifests.has(dep));
      for (const words of all.filter((w) => installs(w, pkg.name, manifest.version))) {
        // A peer is there when the command names it, or when another package it installs depends on it.
        const provided = new Set([
          ...words,
          ...[...manifests].flatMap(([name, m]) => (installs(words, name, m.version) ? Object.keys(m.dependencies ?? {}) : [])),
        ]);
        for (const peer of required) expect([...provided], `${words.join(" ")}: ${pkg.name} needs its peer ${peer}`).toContain(peer);
        // A tarball's dependencies on the other packages are found on no registry: their tarballs come with it.
        if (words.some((w) => w.endsWith(tarballName(pkg.name, manifest.version))))
          for (const dep of workspace)
            expect(installs(words, dep, versionOf(dep)), `${words.join(" ")}: ${pkg.name} needs ${tarballName(dep, versionOf(dep))}`).toBe(
              true,
            );
      }
    }
  });

  it("its gateway command starts the bin from dist/, which answers /healthz", async () => {
    const gatewayCommands = commands.filter((c) => /^node \S+cli\.js\b/.test(c));
    expect(gatewayCommands.length).toBeGreaterThan(0);
    for (const command of gatewayCommands) {
      const [, script = "", ...args] = command.split(/\s+/);
      const gateway = await startGateway(process.execPath, [script, ...withTestValues(args, backends)], backends, ROOT);
      try {
        const health = await healthz(gateway.port);
        expect(health.status, `${command}: ${JSON.stringify(health.body)}`).toBe(200);
        expect(health.body.status).toBe("ok");
      } finally {
        expect(await gateway.stop()).toBe(0);
      }
    }
  }, 90_000);
});
