// A client generated from the gateway's API document works without edits: openapi-typescript turns
// the served GET /openapi.json into types, client/article-scenario.ts is compiled against them by
// tsc (strict, exactOptionalPropertyTypes, noUncheckedIndexedAccess; it holds no non-null assertion
// and no cast), and what tsc emitted runs the article's scenario through openapi-fetch against a real
// gateway — three Redis nodes and PostgreSQL — with an ordinary API key.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Redis } from "ioredis";
import openapiTS, { astToString } from "openapi-typescript";
import pg from "pg";
import { pino } from "pino";
import ts from "typescript";
import { createGateway, serve, type Serving } from "@fenced/gateway";
import { startPostgres, startRedisNodes, type RedisNodes, type StartedPostgres } from "@fenced/servers";
import { FencedPostgres } from "@fenced/store/postgres";

const SCENARIO = fileURLToPath(new URL("./client/article-scenario.ts", import.meta.url));
const NODE_MODULES = fileURLToPath(new URL("../node_modules", import.meta.url));
const TSC = createRequire(import.meta.url).resolve("typescript/bin/tsc");
const API_KEY = randomBytes(24).toString("base64url");
const SCHEMA = "openapi_client";
const TTL_MS = 1_000;

let nodes: RedisNodes;
let postgres: StartedPostgres;
let redisClients: Redis[];
let pool: pg.Pool;
let serving: Serving;
let baseUrl: string;
let work: string;

beforeAll(async () => {
  [nodes, postgres] = await Promise.all([startRedisNodes(3), startPostgres()]);
  redisClients = nodes.urls.map((url) => new Redis(url));
  pool = new pg.Pool({ connectionString: postgres.url, max: 4 });
  pool.on("error", () => undefined);
  const gateway = createGateway({
    // An ordinary key: not a trusted lock client, so its writes need a lease's Fencing-Credential.
    apiKeys: [{ id: "typescript", key: API_KEY, resources: ["articles/"], keys: ["articles/"] }],
    fenceKeys: [{ id: "k1", secret: randomBytes(32) }],
    records: { pool, schema: SCHEMA },
    leases: { clients: redisClients },
    logger: pino({ level: "silent" }),
    defaultMetrics: false,
  });
  await gateway.prepare();
  serving = await serve(gateway.app, { port: 0 });
  baseUrl = `http://127.0.0.1:${serving.port}`;
  work = await mkdtemp(join(tmpdir(), "fenced-openapi-client-"));
});

afterAll(async () => {
  await serving?.drain(2_000);
  for (const c of redisClients ?? []) c.disconnect();
  await Promise.allSettled([pool?.end(), nodes?.stop(), postgres?.stop(), work && rm(work, { recursive: true, force: true })]);
});

/** Runs Node with `args` (in `cwd`); resolves with its exit code and what it printed. */
function run(
  args: readonly string[],
  { env = process.env, cwd }: { env?: NodeJS.ProcessEnv; cwd?: string } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { env, cwd, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString("utf8")));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
    const timer = setTimeout(() => child.kill("SIGKILL"), 50_000);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Generates api.ts from `document` into `dir` and puts the scenario beside it. */
async function prepare(dir: string, document: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "openapi.json"), document);
  await writeFile(join(dir, "api.ts"), astToString(await openapiTS(pathToFileURL(join(dir, "openapi.json")), { silent: true })));
  await copyFile(SCENARIO, join(dir, "article-scenario.ts"));
}

/**
 * tsc on a project in `dir` of `files` (emitted to dir/out unless noEmit), with this package's
 * node_modules. Resolves with tsc's exit code and what it printed.
 */
async function tsc(dir: string, files: readonly string[], emit: boolean): Promise<{ code: number | null; output: string }> {
  await symlink(NODE_MODULES, join(dir, "node_modules"), "dir");
  await writeFile(join(dir, "package.json"), JSON.stringify({ type: "module", private: true }));
  const compilerOptions = {
    strict: true,
    exactOptionalPropertyTypes: true,
    noUncheckedIndexedAccess: true,
    target: "ES2022",
    lib: ["ES2023"],
    module: "NodeNext",
    types: ["node"],
    ...(emit ? { outDir: "out" } : { noEmit: true }),
    // The declarations of openapi-fetch and Node are theirs to check; api.ts and the scenario are checked here.
    skipLibCheck: true,
  };
  await writeFile(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions, files }));
  const { code, stdout, stderr } = await run([TSC, "-p", dir, "--pretty", "false"], { cwd: dir });
  return { code, output: stdout + stderr };
}

/** The scenario compiled against the client generated from `document`, in dir/out. */
async function compile(dir: string, document: string): Promise<{ code: number | null; output: string }> {
  await prepare(dir, document);
  return tsc(dir, ["article-scenario.ts", "api.ts"], true);
}

/** Where the scenario's source asserts a type instead of proving it: `x!`, `x as T`, `<T>x`. */
function assertions(source: string): string[] {
  const file = ts.createSourceFile("article-scenario.ts", source, ts.ScriptTarget.ES2022, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isNonNullExpression(node) || ts.isAsExpression(node) || ts.isTypeAssertionExpression(node)) {
      const { line } = file.getLineAndCharacterOfPosition(node.getStart());
      found.push(`line ${line + 1}: ${node.getText()}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

interface Step {
  readonly client?: string;
  readonly step: string;
  readonly status?: number;
  readonly token?: string;
  readonly etag?: string;
  readonly type?: string;
  readonly highest?: string;
  readonly version?: string;
  readonly value?: unknown;
  readonly ok?: boolean;
  readonly wrong?: readonly string[];
  readonly resources?: readonly string[];
  readonly tokens?: readonly string[];
}

/** The parts of the document the holes below change. */
interface Doc {
  paths: Record<string, Record<string, Operation>>;
  components: {
    schemas: Record<string, { required?: string[]; description?: string }>;
    requestBodies: Record<string, { content: Record<string, { schema: object }> }>;
  };
}
interface Operation {
  requestBody?: { required?: boolean; content?: Record<string, unknown> };
  responses: Record<string, { content?: Record<string, unknown> }>;
}

/** Documents a generated client would be worse for, each with the error tsc must then report on the scenario. */
const HOLES: Record<string, { mutate: (doc: Doc) => void; error: RegExp }> = {
  // LeaseCreateRequest as a schema component: openapi-typescript reads `register` (default false) as always there.
  register: {
    mutate: (doc) => {
      const post = doc.paths["/v1/leases"]?.post;
      const schema = doc.components.requestBodies.LeaseCreateRequest?.content["application/json"]?.schema;
      if (post === undefined || schema === undefined) throw new Error("the document has no POST /v1/leases body");
      doc.components.schemas.LeaseCreateRequest = schema;
      post.requestBody = {
        required: true,
        content: { "application/json": { schema: { $ref: "#/components/schemas/LeaseCreateRequest" } } },
      };
    },
    // The body is one resource or a set: `register` is then required in each of the two.
    error:
      /not assignable to type '\(\{ resource: string; ttlMs: number; register: boolean; \} & \{\}\) \| \(\{ resources: string\[\]; ttlMs: number; register: boolean; \}/,
  },
  fence: {
    mutate: (doc) => {
      const answer = doc.components.schemas.LeaseAnswer;
      if (answer?.required !== undefined) answer.required = answer.required.filter((field) => field !== "fence");
    },
    error: /"Fencing-Credential": string \| undefined/,
  },
  // A record's read and write without a schema.
  recordBodies: {
    mutate: (doc) => {
      const item = doc.paths["/v1/records/{key}"];
      for (const media of [item?.get?.responses["200"]?.content, item?.put?.requestBody?.content])
        if (media !== undefined) media["application/json"] = { schema: { description: "untyped" } };
    },
    error: /Type 'unknown' is not assignable to type/,
  },
  jsonValue: {
    mutate: (doc) => void (doc.components.schemas.JsonValue = { description: "untyped" }),
    error: /Type 'true' is not assignable to type 'never'/,
  },
};

const served = async (): Promise<string> => (await fetch(`${baseUrl}/openapi.json`)).text();

describe("a TypeScript client generated from the served document (openapi-typescript, openapi-fetch)", () => {
  it("compiles the article's scenario strictly, which asserts no type (no `!`, no `as`)", async () => {
    expect(assertions(await readFile(SCENARIO, "utf8"))).toEqual([]);
    expect(assertions("const a = b!; const c = d as string; const e = <number>f;")).toHaveLength(3);
    const dir = await mkdtemp(join(work, "served-"));
    const { code, output } = await compile(dir, await served());
    expect(output, `tsc on ${SCENARIO} against the generated api.ts`).toBe("");
    expect(code).toBe(0);
  });

  it("does not compile against a document with a request default read as present, an optional fence, or untyped records", async () => {
    const dir = await mkdtemp(join(work, "mutants-"));
    const document = await served();
    for (const [name, { mutate }] of Object.entries(HOLES)) {
      const doc = JSON.parse(document) as Doc;
      mutate(doc);
      await prepare(join(dir, name), JSON.stringify(doc));
    }
    // One tsc for all of them: each directory's scenario is checked against its own api.ts.
    const names = Object.keys(HOLES);
    const { code, output } = await tsc(
      dir,
      names.flatMap((n) => [`${n}/article-scenario.ts`, `${n}/api.ts`]),
      false,
    );
    expect(code).not.toBe(0);
    for (const [name, { error }] of Object.entries(HOLES)) {
      const errors = output.split("\n").filter((line) => line.startsWith(`${name}/article-scenario.ts(`));
      expect(errors.join("\n"), `${name}: ${output}`).toMatch(error);
    }
  });

  it("runs it: client 1's held write is refused by the ratchet, its later one by its credential's end; client 2's data stays; a lease of two resources writes a record under each", async () => {
    const dir = await mkdtemp(join(work, "run-"));
    expect((await compile(dir, await served())).code).toBe(0);
    const resource = `articles/${randomBytes(4).toString("hex")}`;
    const key = `${resource}/draft ü.json`;
    const args = [
      join(dir, "out", "article-scenario.js"),
      "--gateway",
      baseUrl,
      "--resource",
      resource,
      "--key",
      key,
      "--ttl-ms",
      String(TTL_MS),
    ];
    const { code, stdout, stderr } = await run(args, { env: { ...process.env, FENCED_GATEWAY_KEY: API_KEY } });
    const steps = stdout
      .split("\n")
      .filter((l) => l.trim() !== "")
      .map((l) => JSON.parse(l) as Step);
    const transcript = `${stdout}\n${stderr}`;
    expect(code, transcript).toBe(0);
    expect(steps.at(-1), transcript).toEqual({ step: "done", ok: true, wrong: [] });

    const find = (client: string, step: string): Step[] => steps.filter((s) => s.client === client && s.step === step);
    const [lease1] = find("client1", "lease");
    const [lease2] = find("client2", "lease");
    const token1 = BigInt(lease1?.token ?? "-1");
    const token2 = BigInt(lease2?.token ?? "-1");
    expect(token2, transcript).toBeGreaterThan(token1);
    // Client 1's write left before client 2's lease and arrived after client 2's write.
    const [sent1] = find("client1", "write sent");
    const [written2] = find("client2", "written");
    const [held1, late1] = find("client1", "written");
    expect(steps.indexOf(sent1 as Step), transcript).toBeLessThan(steps.indexOf(lease2 as Step));
    expect(steps.indexOf(written2 as Step), transcript).toBeLessThan(steps.indexOf(held1 as Step));
    expect(held1).toMatchObject({ status: 409, type: "/problems/stale-token", token: token1.toString(), highest: token2.toString() });
    expect(late1).toMatchObject({ status: 403, type: "/problems/credential-expired" });
    const [, readBack] = find("client2", "read");
    expect(readBack).toMatchObject({
      etag: `"${written2?.version ?? ""}"`,
      token: token2.toString(),
      value: { article: key, text: "written by client2" },
    });

    // The store itself, read without the gateway: client 2's write, under client 2's token.
    const record = await new FencedPostgres(pool, { schema: SCHEMA }).get(key);
    expect(record).toMatchObject({ value: written2?.value, version: written2?.version, token: token2, resource });

    // The lease of two resources: a token for each, and a record under each written in one request.
    const [pairLease] = find("pair", "lease");
    const [pairWritten] = find("pair", "written");
    expect(pairLease, transcript).toMatchObject({ status: 201, resources: [`${resource}/left`, `${resource}/right`] });
    expect(pairWritten, transcript).toMatchObject({ status: 200, tokens: pairLease?.tokens });
    for (const [i, side] of ["left", "right"].entries())
      expect(await new FencedPostgres(pool, { schema: SCHEMA }).get(`${resource}/${side}/total`)).toMatchObject({
        resource: `${resource}/${side}`,
        token: BigInt(pairLease?.tokens?.[i] ?? "-1"),
      });
  });
});
