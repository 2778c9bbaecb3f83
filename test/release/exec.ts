import { spawn } from "node:child_process";

export interface Ran {
  readonly command: string;
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly ms: number;
}

export interface RunOptions {
  readonly cwd: string;
  readonly env?: NodeJS.ProcessEnv;
  readonly timeoutMs?: number;
}

/** Runs a command to completion and keeps all of its output; a timeout kills it (code null). */
export function run(command: string, args: readonly string[], options: RunOptions): Promise<Ran> {
  const started = performance.now();
  const line = [command, ...args].join(" ");
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: options.cwd, env: options.env ?? process.env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 120_000);
    const done = (code: number | null, extra = ""): void => {
      clearTimeout(timer);
      resolve({ command: line, code, stdout, stderr: stderr + extra, ms: Math.round(performance.now() - started) });
    };
    child.once("error", (err) => done(null, `\n${String(err)}`));
    child.once("close", (code) => done(code));
  });
}

/** run(), and an error carrying the command's output unless it exited 0. */
export async function runOk(command: string, args: readonly string[], options: RunOptions): Promise<Ran> {
  const ran = await run(command, args, options);
  if (ran.code !== 0)
    throw new Error(`${ran.command} (in ${options.cwd}) exited ${ran.code}\n${ran.stdout.slice(-4_000)}\n${ran.stderr.slice(-4_000)}`);
  return ran;
}
