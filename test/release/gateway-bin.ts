import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { killHard, spawnTracked, waitFor, type Spawned } from "@fenced/servers";

/** The servers a gateway started from its command line talks to. */
export interface GatewayBackends {
  readonly redisUrls: readonly string[];
  readonly postgresUrl: string;
  readonly s3: {
    readonly endpoint: string;
    readonly region: string;
    readonly accessKeyId: string;
    readonly secretAccessKey: string;
    readonly bucket: string;
  };
}

/** An API key for the gateway's environment: at least 16 characters of the allowed alphabet. */
const API_KEYS = JSON.stringify([{ id: "release-test", key: "release-test-key-0123456789", resources: [""], keys: [""] }]);
/** The fence key that seals lease ids and credentials (leases need one), as the README exports it. */
const FENCE_KEYS = JSON.stringify([{ id: "release-test", secret: randomBytes(32).toString("base64") }]);

/** The value this test gives each flag a command names; a flag without one fails the test (it must be taught it). */
function flagValues(backends: GatewayBackends): Record<string, string> {
  return {
    "--port": "0",
    "--host": "127.0.0.1",
    "--redis": backends.redisUrls.join(","),
    "--postgres": backends.postgresUrl,
    "--s3-bucket": backends.s3.bucket,
    "--s3-endpoint": backends.s3.endpoint,
    "--s3-region": backends.s3.region,
  };
}

/** `--flag value` pairs with this test's values in place of the command's, and always --host and --port. */
export function withTestValues(args: readonly string[], backends: GatewayBackends): string[] {
  const values = flagValues(backends);
  const out: string[] = [];
  const given = new Set<string>();
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] ?? "";
    if (!arg.startsWith("--")) throw new Error(`unexpected argument ${JSON.stringify(arg)} in the gateway command`);
    const value = values[arg];
    if (value === undefined) throw new Error(`the gateway command uses ${arg}, which this test has no value for`);
    out.push(arg, value);
    given.add(arg);
    i++;
  }
  for (const flag of ["--host", "--port"]) if (!given.has(flag)) out.push(flag, values[flag] ?? "");
  return out;
}

export interface RunningGateway {
  readonly port: number;
  readonly spawned: Spawned;
  /** SIGTERM, then the exit code once it has drained. */
  stop(): Promise<number | null>;
}

/** Starts a gateway process and waits for its "listening" log line, which carries the port it bound. */
export async function startGateway(
  command: string,
  args: readonly string[],
  backends: GatewayBackends,
  cwd: string,
): Promise<RunningGateway> {
  const env = {
    ...process.env,
    FENCED_GATEWAY_API_KEYS: API_KEYS,
    FENCED_GATEWAY_FENCE_KEYS: FENCE_KEYS,
    FENCED_GATEWAY_S3_ACCESS_KEY_ID: backends.s3.accessKeyId,
    FENCED_GATEWAY_S3_SECRET_ACCESS_KEY: backends.s3.secretAccessKey,
    FENCED_GATEWAY_S3_REGION: backends.s3.region,
  };
  const spawned = spawnTracked(command, args, { cwd, env });
  let port: number | undefined;
  let buffered = "";
  spawned.child.stdout?.on("data", (chunk: Buffer) => {
    buffered += chunk.toString("utf8");
    for (const line of buffered.split("\n").slice(0, -1)) {
      try {
        const entry = JSON.parse(line) as { msg?: string; port?: number };
        if (entry.msg === "listening" && typeof entry.port === "number") port = entry.port;
      } catch {
        // not a log line
      }
    }
    buffered = buffered.slice(buffered.lastIndexOf("\n") + 1);
  });
  // Done when it listens or when it has exited (a refused configuration, a backend it could not reach).
  const settled = (): Promise<boolean> => Promise.resolve(port !== undefined || spawned.child.exitCode !== null);
  await waitFor("the gateway to listen", settled, 60_000, () => spawned.output()).catch(async (err: unknown) => {
    await killHard(spawned);
    throw err;
  });
  if (port === undefined) throw new Error(`the gateway exited ${spawned.child.exitCode} before listening:\n${spawned.output()}`);
  return {
    port,
    spawned,
    stop: async () => {
      if (spawned.child.exitCode === null) {
        spawned.child.kill("SIGTERM");
        await once(spawned.child, "exit");
      }
      return spawned.child.exitCode;
    },
  };
}

export interface Health {
  readonly status: number;
  readonly body: { status?: string; checks?: Record<string, { ok?: boolean }> };
}

export async function healthz(port: number): Promise<Health> {
  const res = await fetch(`http://127.0.0.1:${port}/healthz`);
  return { status: res.status, body: (await res.json()) as Health["body"] };
}
