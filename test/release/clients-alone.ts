// The lock's tarball with one Redis client installed and no other: a project per client, as a user who
// picked that client has it. Its peers are all optional, so npm installs none of the others, and a
// declaration or a module load that reached a client the user did not install would fail here, not
// in a project that happens to have them all (release.test.ts's consumer installs every one).
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CHECKS, cleanEnv, npmInstall, STRICT, typeCheck, type Check } from "./consumer-project.js";
import { run, type Ran } from "./exec.js";
import type { Tarball } from "./tarballs.js";

export interface LoneClient {
  /** The npm spec installed, the only client in its project. */
  readonly spec: string;
  /** The program's import of the client. */
  readonly imports: string;
  /** Statements that make `clients` (one per URL in `urls`) and `close()` for them. */
  readonly connect: string;
  /** The lock's adapter for this client, if it needs one. */
  readonly adapter?: "fromNodeRedis" | "fromValkeyGlide";
}

/** Every client the lock takes, each major of ioredis and node-redis it declares. */
export const LONE_CLIENTS: readonly LoneClient[] = [
  ...["ioredis@^5", "ioredis@^6"].map((spec) => ({
    spec,
    imports: `import { Redis } from "ioredis";`,
    connect: `const clients = urls.map((url) => new Redis(url));\nconst close = (): void => { for (const c of clients) c.disconnect(); };`,
  })),
  {
    spec: "iovalkey@^0.4",
    imports: `import { Redis } from "iovalkey";`,
    connect: `const clients = urls.map((url) => new Redis(url));\nconst close = (): void => { for (const c of clients) c.disconnect(); };`,
  },
  ...["redis@^5", "redis@^6"].map((spec) => ({
    spec,
    imports: `import { createClient } from "redis";`,
    connect:
      "const clients = urls.map((url) => createClient({ url }));\nawait Promise.all(clients.map((c) => c.connect()));\nconst close = (): void => { for (const c of clients) c.destroy(); };",
    adapter: "fromNodeRedis" as const,
  })),
  {
    spec: "@valkey/valkey-glide@^2",
    imports: `import { GlideClient } from "@valkey/valkey-glide";`,
    connect:
      "const clients = await Promise.all(urls.map((url) => { const { hostname, port } = new URL(url); return GlideClient.createClient({ addresses: [{ host: hostname, port: Number(port) }] }); }));\nconst close = (): void => { for (const c of clients) c.close(); };",
    adapter: "fromValkeyGlide",
  },
];

/** The package a spec names ("@valkey/valkey-glide@^2" → "@valkey/valkey-glide"). */
export function packageOf(spec: string): string {
  return spec.slice(0, spec.lastIndexOf("@"));
}

/** The consumer's own node16 check (consumer-project.ts), which emits what the run executes. */
const CHECK = CHECKS.find((check) => check.name === "node16") as Check;

/** One lease over the user's client, its token printed: the program each project compiles and runs. */
function program(client: LoneClient): string {
  return `${client.imports}
import { ${client.adapter === undefined ? "" : `${client.adapter}, `}Redlock } from "@fenced/lock";

const urls = (process.env.REDIS_URLS ?? "").split(",");
${client.connect}
try {
  const lock = new Redlock(${client.adapter === undefined ? "clients" : `clients.map(${client.adapter})`}, { retryCount: 3 });
  const lease = await lock.acquire(process.env.RESOURCE ?? "alone", 10_000);
  const token: bigint = lease.token;
  await lease.release();
  process.stdout.write(\`\${token}\\n\`);
} finally {
  close();
}
`;
}

/** A strict ES-module project (node16 resolution, every declaration checked) holding the lock, its fence and one client. */
export async function installAlone(dir: string, client: LoneClient, tarballs: readonly Tarball[]): Promise<Ran> {
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "package.json"), `${JSON.stringify({ name: "lock-alone", private: true, type: "module" }, null, 2)}\n`);
  const compilerOptions = { ...STRICT, ...CHECK.compilerOptions };
  await writeFile(join(dir, `tsconfig.${CHECK.name}.json`), `${JSON.stringify({ compilerOptions, files: [CHECK.file] }, null, 2)}\n`);
  await writeFile(join(dir, CHECK.file), program(client));
  const packages = tarballs.filter((t) => t.name === "@fenced/fence" || t.name === "@fenced/lock").map((t) => t.file);
  return npmInstall(dir, [...packages, client.spec, "typescript@latest", "@types/node@^22"]);
}

/** tsc on the project (typeCheck: its errors, one per line), then, when it compiled, the program run against `env`'s nodes. */
export async function checkAndRun(dir: string, env: NodeJS.ProcessEnv): Promise<{ errors: readonly string[]; ran: Ran | null }> {
  const { errors } = await typeCheck(dir, CHECK, join(dir, "node_modules", "typescript", "bin", "tsc"), false);
  if (errors.length > 0) return { errors, ran: null };
  return {
    errors,
    ran: await run(process.execPath, [join(dir, "out-esm", "consumer.mjs")], { cwd: dir, env: cleanEnv(env), timeoutMs: 60_000 }),
  };
}
