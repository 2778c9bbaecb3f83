import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from "node:child_process";
import { existsSync } from "node:fs";
import { delimiter, join } from "node:path";

/**
 * Every server process the harness starts is registered here, so that it is killed
 * when the owning process exits, however it exits (a failed test, an uncaught error, SIGINT).
 */
const live = new Set<ChildProcess>();
let hooked = false;

function killAllSync(): void {
  for (const child of live) {
    try {
      if (child.pid !== undefined) process.kill(child.pid, "SIGCONT");
      child.kill("SIGKILL");
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

/** Starts a process that is killed with the harness; keeps the tail of its output for diagnostics. */
export function spawnTracked(command: string, args: readonly string[], options: SpawnOptions = {}): Spawned {
  hookExit();
  const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], ...options });
  live.add(child);
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

/** SIGKILL (after SIGCONT, so a stopped process dies too) and wait for the exit. */
export async function killHard(spawned: Spawned): Promise<void> {
  const { child } = spawned;
  if (child.exitCode === null && child.signalCode === null) {
    try {
      if (child.pid !== undefined) process.kill(child.pid, "SIGCONT");
    } catch {
      // already gone
    }
    child.kill("SIGKILL");
  }
  await spawned.exited;
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
