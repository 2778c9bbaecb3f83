import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { StoreConnection } from "./counter-store.js";

/**
 * A fenced gateway (packages/gateway) as a process of its own, for one configuration of a chaos run:
 * the run's Redis nodes as its lock, the run's schema or bucket as its store, one ordinary API key
 * (not a trusted lock client: its writes need the credential of a lease) for the workers, and fresh
 * fence keys. Configured by a file and FENCED_GATEWAY_FENCE_KEYS, never by flags (secrets), and
 * stopped with SIGKILL: its state is the run's throwaway servers'.
 */

/**
 * The gateway's CLI, beside the package's entry point as this process resolves @fenced/gateway (a
 * dependency of this package): its TypeScript source, run through tsx, under the "source" condition
 * (tests, `pnpm chaos`), its build otherwise.
 */
const ENTRY = import.meta.resolve("@fenced/gateway");
const FROM_SOURCE = ENTRY.endsWith(".ts");
const CLI = fileURLToPath(new URL(FROM_SOURCE ? "./cli.ts" : "./cli.js", ENTRY));
/** The workspace root: `--import tsx` is resolved from the child's working directory. */
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

/** An API key in the gateway's alphabet (16–256 of A-Z a-z 0-9 . _ ~ + / -): 32 random characters. */
export function newApiKey(): string {
  return randomBytes(24).toString("base64url");
}

export interface GatewayProcessOptions {
  /** The workers' API key (ordinary: writes need a lease's credential). */
  readonly apiKey: string;
  /** The lock nodes, connected directly (the nemesis kills and restarts them on the same ports). */
  readonly redisUrls: readonly string[];
  /** The configuration's namespace, connected directly. */
  readonly store: StoreConnection;
  /** What the workers' API key may touch: lease resources and keys (prefixes). */
  readonly resources: readonly string[];
  readonly keys: readonly string[];
  /** Per lock node, as the library workers' Redlock. */
  readonly nodeTimeoutMs: number;
  /** The S3 store's inline limit, as the library workers': every write is one conditional PUT. */
  readonly inlineLimit: number;
  /** The deadline of every call into the store (its storeTimeoutMs), and of a lease's acquisition. */
  readonly deadlineMs: number;
  /** Give up if the gateway does not listen by then. */
  readonly startTimeoutMs?: number;
}

/** Every gateway process started here, so that none outlives the controller however it exits. */
const live = new Set<ChildProcess>();
export function killGatewaysNow(): void {
  for (const child of live) {
    child.kill("SIGCONT");
    child.kill("SIGKILL");
  }
}

function storeConfig(store: StoreConnection, inlineLimit: number): Record<string, unknown> {
  if (store.backend === "postgres") return { postgres: { url: store.url, schema: store.schema, poolSize: 8 } };
  if (store.backend !== "s3") throw new Error(`the chaos runs through a gateway are on postgres and s3 only, not ${store.backend}`);
  const { bucket, endpoint, region, accessKeyId, secretAccessKey } = store;
  // The store's default prefix, as the library workers' FencedS3: the controller's final read finds the same manifests.
  return { s3: { bucket, endpoint, region, accessKeyId, secretAccessKey, forcePathStyle: true, inlineLimit } };
}

export class GatewayProcess {
  private depth = 0;
  private output = "";
  private listening: ((port: number) => void) | undefined;
  private pending = "";
  #port = 0;
  readonly exited: Promise<void>;

  private constructor(
    private readonly child: ChildProcess,
    /** The workers' API key (ordinary: writes need a lease's credential). */
    readonly apiKey: string,
    private readonly dir: string,
  ) {
    const keep = (chunk: Buffer): void => void (this.output = (this.output + chunk.toString("utf8")).slice(-4_000));
    child.stderr?.on("data", keep);
    child.stdout?.on("data", (chunk: Buffer) => {
      keep(chunk);
      if (this.listening !== undefined) this.scan(chunk.toString("utf8"));
    });
    this.exited = new Promise((resolve) => child.once("exit", () => resolve()));
    void this.exited.then(() => live.delete(child));
  }

  /** Where it listens (on 127.0.0.1): the port it chose itself, as its "listening" line says. */
  get port(): number {
    return this.#port;
  }

  static async start(options: GatewayProcessOptions): Promise<GatewayProcess> {
    const dir = await mkdtemp(join(tmpdir(), "fenced-chaos-gateway-"));
    const { apiKey } = options;
    const config = {
      host: "127.0.0.1",
      // Its own pick, read back from its log: a port chosen here could be taken before it binds it.
      port: 0,
      apiKeys: [{ id: "chaos-workers", key: apiKey, resources: options.resources, keys: options.keys }],
      // retryCount 0: a held lock answers 409 at once and the worker retries, as the gateway's clients do.
      redis: { urls: options.redisUrls, retryCount: 0, nodeTimeoutMs: options.nodeTimeoutMs, acquireTimeoutMs: options.deadlineMs },
      ...storeConfig(options.store, options.inlineLimit),
      storeTimeoutMs: options.deadlineMs,
      // The counter document grows by one log entry per increment.
      limits: { recordBytes: 32 * 1024 * 1024 },
      // Longer than any pause of a worker: a connection it kept alive is still there when it wakes up.
      keepAliveTimeoutMs: 120_000,
      // "info": the "listening" line gives the port. Refused requests (every held lock) are logged at
      // info too; once the port is known, the output is only kept as a tail for a report.
      logLevel: "info",
    };
    const file = join(dir, "gateway.json");
    await writeFile(file, JSON.stringify(config), { mode: 0o600 });
    // Whatever FENCED_GATEWAY_* the caller's environment holds must not override the file.
    const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("FENCED_GATEWAY_")));
    const child = spawn(process.execPath, [...(FROM_SOURCE ? ["--conditions=source", "--import", "tsx"] : []), CLI], {
      cwd: ROOT,
      env: {
        ...env,
        FENCED_GATEWAY_CONFIG: file,
        FENCED_GATEWAY_FENCE_KEYS: JSON.stringify([{ id: "chaos", secret: randomBytes(32).toString("base64") }]),
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    live.add(child);
    const gateway = new GatewayProcess(child, apiKey, dir);
    try {
      await gateway.ready(options.startTimeoutMs ?? 60_000);
    } catch (err) {
      await gateway.stop();
      throw err;
    }
    return gateway;
  }

  /** The tail of the gateway's output (its log lines), for a report when it died. */
  get log(): string {
    return this.output;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** SIGSTOP; nested pauses resume only when the last one ends. */
  pause(): void {
    if (this.depth++ === 0) this.signal("SIGSTOP");
  }

  resume(): void {
    this.depth = Math.max(0, this.depth - 1);
    if (this.depth === 0) this.signal("SIGCONT");
  }

  /** Kills the process (continued first, so that a stopped one dies too) and removes its config. */
  async stop(): Promise<void> {
    this.depth = 0;
    this.signal("SIGCONT");
    this.signal("SIGKILL");
    await this.exited;
    await rm(this.dir, { recursive: true, force: true });
  }

  private signal(signal: NodeJS.Signals): void {
    if (this.running) this.child.kill(signal);
  }

  /** It listens only once its stores are prepared (tables created, S3 conditional writes verified). */
  private async ready(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    try {
      this.#port = await Promise.race([
        new Promise<number>((resolve) => (this.listening = resolve)),
        this.exited.then(() => Promise.reject(new Error(`the gateway exited before it listened: ${this.output.trim().slice(-1_000)}`))),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`the gateway did not listen within ${timeoutMs} ms: ${this.output.trim().slice(-1_000)}`)),
            timeoutMs,
          );
        }),
      ]);
    } finally {
      clearTimeout(timer);
      this.listening = undefined;
      this.pending = "";
    }
  }

  /** Looks for pino's `{"msg":"listening","port":…}` line among whole lines of output. */
  private scan(text: string): void {
    this.pending += text;
    let nl: number;
    while ((nl = this.pending.indexOf("\n")) >= 0) {
      const line = this.pending.slice(0, nl);
      this.pending = this.pending.slice(nl + 1);
      try {
        const entry = JSON.parse(line) as { msg?: unknown; port?: unknown };
        if (entry.msg === "listening" && typeof entry.port === "number") this.listening?.(entry.port);
      } catch {
        // Not a log line (tsx or Node warnings on stdout): only the tail keeps it.
      }
    }
  }
}
