import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from "node:child_process";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { delimiter, join } from "node:path";

/**
 * Every server process the harness starts is registered here, so that it is killed
 * when the owning process exits, however it exits (a failed test, an uncaught error, SIGINT).
 */
const live = new Set<ChildProcess>();
/** The tracked processes started with `{ tree: true }`: killed together with every process they forked. */
const trees = new WeakSet<ChildProcess>();
let hooked = false;

function killAllSync(): void {
  for (const child of live) {
    try {
      // Descendants first collected, then killed: once the leader dies they are reparented and lost from view.
      if (trees.has(child) && child.pid !== undefined) for (const pid of descendants(child.pid)) signal(pid, "SIGKILL");
      child.kill("SIGKILL"); // stopped or not: see killHard
    } catch {
      // already gone
    }
  }
  live.clear();
}

function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.once("exit", killAllSync);
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.once(signal, () => {
      killAllSync();
      process.kill(process.pid, signal);
    });
  }
}

export interface Spawned {
  readonly child: ChildProcess;
  /** Resolves when the process has exited (for any reason). */
  readonly exited: Promise<void>;
  /** Last output of the process, for error messages. */
  output(): string;
}

export interface SpawnTrackedOptions extends SpawnOptions {
  /**
   * The process forks workers that must share its fate (PostgreSQL's backends, which each start a
   * session of their own, so a process-group signal misses them): the exit hook kills them too, and
   * stopTree/continueTree/killTree reach them.
   */
  readonly tree?: boolean;
}

/** Starts a process that is killed with the harness; keeps the tail of its output for diagnostics. */
export function spawnTracked(command: string, args: readonly string[], options: SpawnTrackedOptions = {}): Spawned {
  hookExit();
  const { tree = false, ...spawnOptions } = options;
  const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], ...spawnOptions });
  live.add(child);
  if (tree) trees.add(child);
  let tail = "";
  const keep = (chunk: Buffer): void => {
    tail = (tail + chunk.toString("utf8")).slice(-8_000);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const exited = new Promise<void>((resolve) => {
    child.once("exit", () => {
      live.delete(child);
      resolve();
    });
    child.once("error", (err) => {
      tail += `\n${String(err)}`;
      live.delete(child);
      resolve();
    });
  });
  return { child, exited, output: () => tail };
}

/**
 * SIGKILL and wait for the exit. SIGKILL alone: it kills a stopped process too, and a SIGCONT first
 * would let a paused server run between the two signals and answer a request it held — a test that
 * pauses a server and kills it means that request is never answered (processes.test.ts).
 */
export async function killHard(spawned: Spawned): Promise<void> {
  const { child } = spawned;
  if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  await spawned.exited;
}

/** A process's state letter from /proc (R, S, D, T stopped, Z zombie …) and parent, or undefined once it is gone. */
function procStat(pid: number): { state: string; ppid: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name may contain spaces and parentheses: fields resume after the last ')'.
    const [state = "", ppid = ""] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { state, ppid: Number(ppid) };
  } catch {
    return undefined;
  }
}

/** Every live descendant of `pid` (children, their children …), read from /proc (Linux). */
function descendants(pid: number): number[] {
  // Without /proc (not Linux) no descendant is seen: signals then reach the leader alone.
  if (!existsSync("/proc/self/stat")) return [];
  const children = new Map<number, number[]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = procStat(Number(entry));
    if (stat === undefined || stat.state === "Z") continue;
    children.set(stat.ppid, [...(children.get(stat.ppid) ?? []), Number(entry)]);
  }
  const found: number[] = [];
  for (let queue = [...(children.get(pid) ?? [])]; queue.length > 0;) {
    const next = queue.shift() as number;
    found.push(next);
    queue.push(...(children.get(next) ?? []));
  }
  return found;
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // already gone
  }
}

/** Whether the process is gone (a zombie counts as gone: it runs nothing and holds no socket). */
function gone(pid: number): boolean {
  const state = procStat(pid)?.state;
  return state === undefined || state === "Z" || state === "X";
}

/** A synchronous pause, for waits of a few milliseconds inside stopTree (ServerFaults.pause is synchronous). */
function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * SIGSTOP a process (a `{ tree: true }` one with every descendant), and return once all of them are stopped.
 * The leader first, and only once it is stopped are its children listed, so none it forks is missed.
 */
export function stopTree(spawned: Spawned, timeoutMs = 2_000): void {
  const pid = spawned.child.pid;
  if (pid === undefined) return;
  const deadline = Date.now() + timeoutMs;
  const stopped = (p: number): boolean => gone(p) || procStat(p)?.state === "T";
  signal(pid, "SIGSTOP");
  while (!stopped(pid) && Date.now() < deadline) sleepSync(1);
  for (;;) {
    const running = descendants(pid).filter((p) => !stopped(p));
    if (running.length === 0) return;
    if (Date.now() > deadline) throw new Error(`processes ${running.join(", ")} under ${pid} did not stop within ${timeoutMs} ms`);
    for (const p of running) signal(p, "SIGSTOP");
    sleepSync(1);
  }
}

/** SIGCONT a `{ tree: true }` process and every descendant. */
export function continueTree(spawned: Spawned): void {
  const pid = spawned.child.pid;
  if (pid === undefined) return;
  for (const p of descendants(pid)) signal(p, "SIGCONT");
  signal(pid, "SIGCONT");
}

/** SIGKILL a `{ tree: true }` process and every descendant; resolves once every one of them is gone. */
export async function killTree(spawned: Spawned, timeoutMs = 10_000): Promise<void> {
  const pid = spawned.child.pid;
  if (pid === undefined || (spawned.child.exitCode !== null && descendants(pid).length === 0)) {
    await spawned.exited;
    return;
  }
  // Stopped first, so that nothing forks or is reparented while the list is taken.
  stopTree(spawned);
  const all = [pid, ...descendants(pid)];
  for (const p of all) signal(p, "SIGKILL"); // no SIGCONT: see killHard
  await spawned.exited;
  await waitFor(`processes ${all.join(", ")} to exit`, () => Promise.resolve(all.every(gone)), timeoutMs);
}

/** Absolute path of an executable on PATH or in one of the extra directories, or undefined. */
export function findExecutable(name: string, extraDirs: readonly string[] = []): string | undefined {
  const dirs = [...(process.env.PATH ?? "").split(delimiter), ...extraDirs];
  for (const dir of dirs) {
    if (dir === "") continue;
    const candidate = join(dir, name);
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

/** Like findExecutable, but a missing binary is a failure that says what to install. */
export function requireExecutable(name: string, install: string, extraDirs: readonly string[] = []): string {
  const found = findExecutable(name, extraDirs);
  if (found === undefined) {
    throw new Error(
      `'${name}' was not found on PATH. Install it (${install}), or point the tests at running servers through the documented environment variables.`,
    );
  }
  return found;
}

/** Runs a short command to completion; throws with its output if it fails. */
export function runOrThrow(
  command: string,
  args: readonly string[],
  options: { cwd?: string; uid?: number; gid?: number; env?: NodeJS.ProcessEnv } = {},
): string {
  const result = spawnSync(command, args, { encoding: "utf8", ...options });
  if (result.error !== undefined) throw result.error;
  if (result.status !== 0) {
    throw new Error(
      `${command} ${args.join(" ")} exited with ${String(result.status ?? result.signal)}:\n${result.stdout}${result.stderr}`,
    );
  }
  return result.stdout;
}

/** Polls until check() resolves true or the deadline passes. */
export async function waitFor(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs: number,
  diagnostics: () => string = () => "",
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if (await check()) return;
    } catch {
      // not ready yet
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${diagnostics()}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
