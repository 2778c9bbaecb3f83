import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";

/** The fenced-gateway binary as a child process, its JSON log lines read as they come. */
const CLI = fileURLToPath(new URL("./cli.ts", import.meta.url));
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

export interface Child {
  readonly process: ChildProcess;
  readonly lines: Record<string, unknown>[];
  /** Resolves with the first log line whose msg is `msg`. */
  waitFor(msg: string): Promise<Record<string, unknown>>;
  readonly exited: Promise<number | null>;
  stderr(): string;
}

export function startCli(args: string[], env: Record<string, string>): Child {
  const child = spawn(process.execPath, ["--conditions=source", "--import", "tsx", CLI, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: Record<string, unknown>[] = [];
  const waiters: { msg: string; resolve: (line: Record<string, unknown>) => void }[] = [];
  let buffered = "";
  let err = "";
  child.stderr?.on("data", (d: Buffer) => (err += d.toString()));
  child.stdout?.on("data", (d: Buffer) => {
    buffered += d.toString();
    let nl: number;
    while ((nl = buffered.indexOf("\n")) >= 0) {
      const line = JSON.parse(buffered.slice(0, nl)) as Record<string, unknown>;
      buffered = buffered.slice(nl + 1);
      lines.push(line);
      for (const w of waiters.filter((w) => w.msg === line.msg)) w.resolve(line);
    }
  });
  const exited = once(child, "exit").then(([code]) => code as number | null);
  return {
    process: child,
    lines,
    exited,
    stderr: () => err,
    waitFor: (msg) => {
      const seen = lines.find((l) => l.msg === msg);
      if (seen !== undefined) return Promise.resolve(seen);
      return Promise.race([
        new Promise<Record<string, unknown>>((resolve) => waiters.push({ msg, resolve })),
        exited.then((code) => Promise.reject(new Error(`the gateway exited (${code}) before logging "${msg}": ${err}`))),
      ]);
    },
  };
}

/** Runs the binary to its end and answers its exit code and its output as text (for `--help`, `--version` and refusals). */
export async function runCli(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ["--conditions=source", "--import", "tsx", CLI, ...args], {
    cwd: ROOT,
    env: { ...process.env, NODE_NO_WARNINGS: "1", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const [code] = (await once(child, "close")) as [number | null];
  return { code, stdout, stderr };
}
