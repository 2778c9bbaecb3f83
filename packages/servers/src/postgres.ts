import { existsSync, readFileSync, readdirSync } from "node:fs";
import { chown, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import pg from "pg";
import { dockerAvailable } from "./docker.js";
import { freePort } from "./ports.js";
import type { ServerFaults } from "./faults.js";
import { continueTree, killTree, requireExecutable, spawnTracked, stopTree, waitFor, type Spawned } from "./processes.js";

export interface StartedPostgres {
  /** A connection string for pg.Pool / pg.Client. */
  readonly url: string;
  /** env: DATABASE_URL as given; docker: a postgres:16 container; local: the machine's PostgreSQL binaries. */
  readonly source: "env" | "docker" | "local";
  /** Kills the server and removes its data; idempotent. A DATABASE_URL server is left untouched. */
  stop(): Promise<void>;
  /** Present when started with `{ faults: true }`: pause, resume, kill and restart the server. */
  readonly faults?: ServerFaults;
}

export interface StartPostgresOptions {
  /**
   * Keep PostgreSQL's durability settings (fsync, synchronous_commit, full_page_writes) at their
   * defaults, for benchmarks that must pay a real commit flush. Default false: test data is
   * throwaway and a flush per commit only costs time. Has no effect on a DATABASE_URL server.
   */
  readonly durable?: boolean;
  /**
   * Start a server this process owns from the machine's binaries — never DATABASE_URL or a container,
   * even when they are available — and hand back its `faults`, so that a fault test never skips its
   * fault. Without `durable` it still acknowledges a commit only once written (synchronous_commit
   * on), so a killed server keeps every acknowledged commit. Default false.
   */
  readonly faults?: boolean;
}

const LOOPBACK = "127.0.0.1";
const START_TIMEOUT_MS = 20_000;
const INSTALL_HINT = "apt-get install postgresql";

/**
 * A real PostgreSQL for tests and benchmarks: DATABASE_URL if set, else a postgres:16 container when
 * a Docker engine answers, else a private server from the machine's binaries on a free loopback port.
 */
export async function startPostgres(
  options: StartPostgresOptions & { readonly faults: true },
): Promise<StartedPostgres & { readonly faults: ServerFaults }>;
export async function startPostgres(options?: StartPostgresOptions): Promise<StartedPostgres>;
export async function startPostgres(options: StartPostgresOptions = {}): Promise<StartedPostgres> {
  const durable = options.durable ?? false;
  // Faults need the server's processes: only a local server started here has them at hand.
  if (options.faults === true) return startLocalPostgres(durable ? [] : KILL_SAFE_SETTINGS);
  const fromEnv = process.env.DATABASE_URL;
  if (fromEnv !== undefined && fromEnv !== "") return { url: fromEnv, source: "env", stop: () => Promise.resolve() };
  if (await dockerAvailable()) return startDockerPostgres(durable);
  return startLocalPostgres(durable ? [] : FAST_SETTINGS);
}

/** Throwaway data: durability settings only cost time. */
const FAST_SETTINGS = ["fsync=off", "synchronous_commit=off", "full_page_writes=off"];

/**
 * A server started for faults is killed, not its machine: the operating system keeps what was
 * written, so flushes (fsync) can stay off, but a commit must be written before it is acknowledged
 * (synchronous_commit on, the default) or a kill loses acknowledged commits.
 */
const KILL_SAFE_SETTINGS = ["fsync=off", "full_page_writes=off"];

/** Resolves once a fresh connection answers a query: accepting TCP alone does not mean recovery is over. */
async function answersQuery(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  // A refused connection also emits 'error' on the client; without a listener it would crash the process.
  client.on("error", () => undefined);
  try {
    await client.connect();
    const result = await client.query<{ one: number }>("SELECT 1 AS one");
    return result.rows[0]?.one === 1;
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function startDockerPostgres(durable: boolean): Promise<StartedPostgres> {
  const { GenericContainer, Wait } = await import("testcontainers");
  let definition = new GenericContainer("postgres:16")
    .withEnvironment({ POSTGRES_USER: "fenced", POSTGRES_PASSWORD: "fenced", POSTGRES_DB: "fenced" })
    .withExposedPorts(5432);
  // The data is throwaway: tmpfs and no flushes keep start-up and commits fast.
  if (!durable)
    definition = definition
      .withTmpFs({ "/var/lib/postgresql/data": "rw" })
      .withCommand(["postgres", ...FAST_SETTINGS.flatMap((s) => ["-c", s])]);
  const container = await definition
    // The entrypoint starts a temporary server for init scripts first; the second message is the real one.
    .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
    .start();
  const url = `postgres://fenced:fenced@${container.getHost()}:${container.getMappedPort(5432)}/fenced`;
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => (stopped ??= container.stop().then(() => undefined));
  try {
    await waitFor("postgres container to answer a query", () => answersQuery(url), START_TIMEOUT_MS);
  } catch (err) {
    await stop();
    throw err;
  }
  return { url, source: "docker", stop };
}

/** Directories where distributions put initdb/postgres outside PATH (Debian: /usr/lib/postgresql/<major>/bin), newest first. */
function postgresBinDirs(): string[] {
  const dirs: string[] = [];
  try {
    const majors = readdirSync("/usr/lib/postgresql")
      .filter((name) => /^\d+$/.test(name))
      .sort((a, b) => Number(b) - Number(a));
    for (const major of majors) dirs.push(join("/usr/lib/postgresql", major, "bin"));
  } catch {
    // not a Debian-style layout
  }
  dirs.push("/usr/local/pgsql/bin");
  return dirs;
}

/** initdb and postgres from the same installation: a data dir from another major would refuse to start. */
export function findPostgresBinaries(extraDirs: readonly string[] = postgresBinDirs()): { initdb: string; postgres: string } {
  const initdb = requireExecutable("initdb", INSTALL_HINT, extraDirs);
  const postgres = join(dirname(initdb), "postgres");
  if (!existsSync(postgres))
    throw new Error(`'postgres' was not found next to ${initdb}. Install PostgreSQL (${INSTALL_HINT}), or set DATABASE_URL.`);
  return { initdb, postgres };
}

/**
 * PostgreSQL refuses to run as root. When we are root, run it as the `postgres` system user
 * (the postgresql package creates it); otherwise as ourselves.
 */
function serverIdentity(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  let passwd = "";
  try {
    passwd = readFileSync("/etc/passwd", "utf8");
  } catch {
    // fall through to the error below
  }
  for (const line of passwd.split("\n")) {
    const [name, , uid, gid] = line.split(":");
    if (name === "postgres" && uid !== undefined && gid !== undefined) return { uid: Number(uid), gid: Number(gid) };
  }
  throw new Error(
    `PostgreSQL cannot run as root and there is no 'postgres' user to run it as. Install PostgreSQL (${INSTALL_HINT}), run as a non-root user, or set DATABASE_URL.`,
  );
}

class PortTaken extends Error {}

async function startLocalPostgres(settings: readonly string[]): Promise<StartedPostgres & { readonly faults: ServerFaults }> {
  const bins = findPostgresBinaries();
  const identity = serverIdentity();
  const dir = await mkdtemp(join(tmpdir(), "fenced-pg-"));
  try {
    // The server user must own the directory: it holds the data dir and the unix socket.
    if (identity !== undefined) await chown(dir, identity.uid, identity.gid);
    const dataDir = join(dir, "data");
    // Trust auth is acceptable only because the server listens on loopback and a private socket dir, and dies with us.
    await runToEnd(bins.initdb, ["-D", dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"], dir, identity);
    for (let attempt = 1; ; attempt++) {
      const port = await freePort();
      try {
        const start = (): Promise<Spawned> => launch(bins.postgres, dataDir, dir, port, identity, settings);
        return new LocalPostgres(await start(), dir, dataDir, `postgres://postgres@${LOOPBACK}:${port}/postgres`, start);
      } catch (err) {
        if (!(err instanceof PortTaken) || attempt >= 8) throw err;
      }
    }
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/** Runs a set-up command as the server user and waits for it; tracked so it cannot outlive us. */
async function runToEnd(
  command: string,
  args: readonly string[],
  cwd: string,
  identity: { uid: number; gid: number } | undefined,
): Promise<void> {
  const spawned = spawnTracked(command, args, { cwd, ...identity, env: { ...process.env, LC_ALL: "C" } });
  await spawned.exited;
  if (spawned.child.exitCode !== 0) {
    throw new Error(
      `${command} ${args.join(" ")} failed (${String(spawned.child.exitCode ?? spawned.child.signalCode)}):\n${spawned.output()}`,
    );
  }
}

async function launch(
  binary: string,
  dataDir: string,
  socketDir: string,
  port: number,
  identity: { uid: number; gid: number } | undefined,
  extraSettings: readonly string[],
): Promise<Spawned> {
  const settings = [
    `listen_addresses=${LOOPBACK}`,
    `port=${port}`,
    // A private socket dir: no clash with a system server's /var/run/postgresql, no permission issues.
    `unix_socket_directories=${socketDir}`,
    "max_connections=200",
    ...extraSettings,
  ];
  const args = ["-D", dataDir, ...settings.flatMap((s) => ["-c", s])];
  // Run postgres in the foreground (not pg_ctl, which daemonises): spawnTracked kills it with us, and
  // as a tree its backends too (each backend starts a session of its own, out of the postmaster's group).
  const spawned = spawnTracked(binary, args, { cwd: socketDir, ...identity, env: { ...process.env, LC_ALL: "C" }, tree: true });
  let exited = false;
  void spawned.exited.then(() => {
    exited = true;
  });
  const url = `postgres://postgres@${LOOPBACK}:${port}/postgres`;
  try {
    await waitFor(
      `postgres on port ${port}`,
      async () => exited || (await answersQuery(url)),
      START_TIMEOUT_MS,
      () => spawned.output(),
    );
  } catch (err) {
    await killTree(spawned);
    throw err;
  }
  if (exited) {
    const output = spawned.output();
    if (/could not bind|address already in use/i.test(output)) throw new PortTaken(output);
    throw new Error(`postgres on port ${port} exited during start-up:\n${output}`);
  }
  return spawned;
}

/** A local server and its faults: every signal reaches the postmaster and every process it forked. */
class LocalPostgres implements StartedPostgres {
  readonly source = "local";
  readonly faults: ServerFaults;
  private killed = false;
  private paused = false;
  private stopped: Promise<void> | undefined;

  constructor(
    private spawned: Spawned,
    private readonly dir: string,
    private readonly dataDir: string,
    readonly url: string,
    private readonly start: () => Promise<Spawned>,
  ) {
    const state = (): { killed: boolean; paused: boolean } => ({ killed: this.killed, paused: this.paused });
    this.faults = {
      get running() {
        return !state().killed;
      },
      get paused() {
        return state().paused;
      },
      pause: () => this.pause(),
      resume: () => this.resume(),
      kill: () => this.kill(),
      restart: () => this.restart(),
    };
  }

  stop(): Promise<void> {
    return (this.stopped ??= this.shutDown());
  }

  private pause(): void {
    if (this.killed) throw new Error(`postgres (${this.url}) is killed; restart() it before pausing`);
    // SIGSTOP of the postmaster alone would leave its backends answering on open connections.
    stopTree(this.spawned);
    this.paused = true;
  }

  private resume(): void {
    continueTree(this.spawned);
    this.paused = false;
  }

  private async kill(): Promise<void> {
    await killTree(this.spawned);
    this.killed = true;
    this.paused = false;
    // Every process of the server is gone: a stale lock file would only risk naming a reused pid.
    await rm(join(this.dataDir, "postmaster.pid"), { force: true });
  }

  private async restart(): Promise<void> {
    if (this.stopped !== undefined) throw new Error(`postgres (${this.url}) was stopped`);
    if (!this.killed) await this.kill();
    // Same data dir, port and settings; crash recovery runs first, and start() resolves once a query answers.
    const deadline = Date.now() + 5_000;
    for (;;) {
      try {
        this.spawned = await this.start();
        break;
      } catch (err) {
        // The port may still be held for a moment by what the killed server left behind.
        if (!(err instanceof PortTaken) || Date.now() > deadline) throw err;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    this.killed = false;
  }

  private async shutDown(): Promise<void> {
    if (!this.killed) {
      const { child } = this.spawned;
      // A paused server cannot act on SIGQUIT.
      continueTree(this.spawned);
      // SIGQUIT is PostgreSQL's immediate shutdown: the postmaster kills its backends and removes its
      // shared memory before exiting. SIGKILL would orphan the SysV segment; it is only the fallback.
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGQUIT");
      const gone = await Promise.race([
        this.spawned.exited.then(() => true),
        new Promise<boolean>((r) => setTimeout(() => r(false), 5_000).unref()),
      ]);
      if (!gone) await killTree(this.spawned);
      this.killed = true;
    }
    await rm(this.dir, { recursive: true, force: true });
  }
}
