import { fork, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { FileDoc, WriteOutcome } from "./backends.js";
import type { ClientRead, ClientSetup, DemoClient, LeaseInfo } from "./clients.js";

/** parent → worker */
export interface Request {
  readonly id: number;
  readonly op: "init" | "acquire" | "read" | "write" | "register" | "leaseRemainingMs" | "release" | "close";
  readonly args: readonly unknown[];
}

/** worker → parent */
export type Reply =
  | { readonly id: number; readonly ok: true; readonly value: unknown }
  | { readonly id: number; readonly ok: false; readonly error: { name: string; message: string; stack?: string } };

/** Children still alive: killed on the way out whatever happens, since a stopped one would never exit by itself. */
const live = new Set<ChildProcess>();

export function killAllClientProcesses(): void {
  for (const child of live) {
    try {
      // SIGCONT first: a stopped process acts on SIGKILL anyway, but its parent then sees the exit at once.
      child.kill("SIGCONT");
      child.kill("SIGKILL");
    } catch {
      // already gone
    }
  }
  live.clear();
}

/** The worker runs from source under tsx when this module does (pnpm demo), from dist otherwise. */
function workerCommand(): { path: string; execArgv: string[] } {
  const fromSource = import.meta.url.endsWith(".ts");
  const path = fileURLToPath(new URL(fromSource ? "./client-worker.ts" : "./client-worker.js", import.meta.url));
  return { path, execArgv: fromSource ? ["--import", import.meta.resolve("tsx"), "--conditions=source"] : [] };
}

/**
 * A client in a separate OS process, driven over IPC. pause() stops it with SIGSTOP — the whole
 * process, its timers and its sockets, as a stop-the-world GC pause or a VM suspension would — and
 * its lease runs out on the lock nodes while it cannot do anything about it.
 */
export class PausedClient implements DemoClient {
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private stderr = "";
  private readonly exited: Promise<void>;

  private constructor(
    readonly name: string,
    private readonly child: ChildProcess,
  ) {
    child.stderr?.on("data", (chunk: Buffer) => {
      this.stderr = (this.stderr + chunk.toString("utf8")).slice(-4_000);
    });
    child.on("message", (reply: Reply) => {
      const waiter = this.waiting.get(reply.id);
      if (waiter === undefined) return;
      this.waiting.delete(reply.id);
      if (reply.ok) waiter.resolve(reply.value);
      else waiter.reject(Object.assign(new Error(`${name}: ${reply.error.message}`), { name: reply.error.name, stack: reply.error.stack }));
    });
    this.exited = new Promise((resolve) => {
      child.once("exit", (code, signal) => {
        live.delete(child);
        const gone = new Error(
          `${name}'s process exited (${String(code ?? signal)}) before answering${this.stderr === "" ? "" : `:\n${this.stderr}`}`,
        );
        for (const waiter of this.waiting.values()) waiter.reject(gone);
        this.waiting.clear();
        resolve();
      });
    });
  }

  /** Forks the worker and waits until it has connected to Redis and the storage. */
  static async start(setup: ClientSetup): Promise<PausedClient> {
    const { path, execArgv } = workerCommand();
    // "advanced" serialization: structured clone, so nothing is lost on the way (no JSON round trip).
    const child = fork(path, [], { execArgv, serialization: "advanced", stdio: ["ignore", "ignore", "pipe", "ipc"] });
    live.add(child);
    const client = new PausedClient(setup.name, child);
    try {
      await client.call("init", setup);
    } catch (err) {
      killChild(child);
      throw err;
    }
    return client;
  }

  get pid(): number {
    const pid = this.child.pid;
    if (pid === undefined) throw new Error(`${this.name} has no process`);
    return pid;
  }

  acquire(resource: string, ttlMs: number): Promise<LeaseInfo> {
    return this.call("acquire", resource, ttlMs) as Promise<LeaseInfo>;
  }
  read(key: string): Promise<ClientRead> {
    return this.call("read", key) as Promise<ClientRead>;
  }
  write(key: string, doc: FileDoc, ifVersion?: string): Promise<WriteOutcome> {
    return this.call("write", key, doc, ifVersion) as Promise<WriteOutcome>;
  }
  register(): Promise<WriteOutcome> {
    return this.call("register") as Promise<WriteOutcome>;
  }
  leaseRemainingMs(): Promise<number> {
    return this.call("leaseRemainingMs") as Promise<number>;
  }
  async release(): Promise<void> {
    await this.call("release");
  }

  /** SIGSTOP, and wait until the kernel reports the process stopped: from here on it runs no instruction. */
  async pause(): Promise<string> {
    this.child.kill("SIGSTOP");
    const deadline = Date.now() + 2_000;
    for (;;) {
      const state = processState(this.pid);
      if (state === undefined) return "SIGSTOP sent";
      if (state === "T") return "state T (stopped)";
      if (Date.now() > deadline) throw new Error(`${this.name} (pid ${this.pid}) did not stop after SIGSTOP (state ${state})`);
      await new Promise((r) => setTimeout(r, 2));
    }
  }

  resume(): void {
    this.child.kill("SIGCONT");
  }

  async close(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.resume();
    const closing = this.call("close").catch(() => undefined);
    const done = await Promise.race([
      closing.then(() => this.exited).then(() => true),
      new Promise<boolean>((r) => setTimeout(() => r(false), 3_000).unref()),
    ]);
    if (!done) killChild(this.child);
    await this.exited;
  }

  /** Sends a request. While the process is stopped it waits in the IPC pipe and runs once resumed. */
  private call(op: Request["op"], ...args: unknown[]): Promise<unknown> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      const request: Request = { id, op, args };
      this.child.send(request, (err) => {
        if (err !== null && this.waiting.delete(id)) reject(err);
      });
    });
  }
}

function killChild(child: ChildProcess): void {
  try {
    child.kill("SIGCONT");
    child.kill("SIGKILL");
  } catch {
    // already gone
  }
}

/** The process state letter from /proc (Linux): "T" is stopped. undefined where /proc is missing. */
function processState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name is in parentheses and may hold spaces: the state follows the last ')'.
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
  } catch {
    return undefined;
  }
}
