import { fork, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { killGatewaysNow } from "./gateway-process.js";
import { WORKER_ENV, type ToWorker, type WorkerConfig } from "./worker.js";

/** worker.ts beside this file when run from source (through tsx), worker.js when built. */
const FROM_SOURCE = new URL(import.meta.url).pathname.endsWith(".ts");
const WORKER_FILE = fileURLToPath(new URL(FROM_SOURCE ? "./worker.ts" : "./worker.js", import.meta.url));
/** The package directory: `--import tsx` is resolved from the child's working directory. */
const PACKAGE_DIR = fileURLToPath(new URL("..", import.meta.url));

/**
 * Workers of every run, so that none outlives the controller however it exits. A stopped worker
 * would otherwise survive a Ctrl-C (the SIGINT stays pending) as a stopped orphan.
 */
const liveWorkers = new Set<ChildProcess>();
let exitHooked = false;
export function killWorkersOnExit(): void {
  if (exitHooked) return;
  exitHooked = true;
  const killAll = (): void => {
    for (const child of liveWorkers) {
      child.kill("SIGCONT");
      child.kill("SIGKILL");
    }
    killGatewaysNow();
  };
  process.once("exit", killAll);
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    // First in line: the server harness's own handler re-raises the signal, which ends the process.
    process.prependOnceListener(signal, () => {
      killAll();
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    });
  }
}

/** One worker process, as the controller drives it: IPC, SIGSTOP/SIGCONT (nested), its stderr's tail. */
export class WorkerHandle {
  private depth = 0;
  private readonly done: Promise<void>;
  private stderr = "";

  private constructor(
    readonly index: number,
    readonly child: ChildProcess,
  ) {
    child.stderr?.on("data", (chunk: Buffer) => (this.stderr = (this.stderr + chunk.toString("utf8")).slice(-4_000)));
    this.done = new Promise((resolve) => child.once("exit", () => resolve()));
    void this.done.then(() => liveWorkers.delete(child));
  }

  static fork(config: WorkerConfig): WorkerHandle {
    const child = fork(WORKER_FILE, [], {
      cwd: PACKAGE_DIR,
      execArgv: FROM_SOURCE ? ["--import", "tsx", "--conditions=source"] : [],
      env: { ...process.env, [WORKER_ENV]: JSON.stringify(config) },
      stdio: ["ignore", "ignore", "pipe", "ipc"],
    });
    liveWorkers.add(child);
    return new WorkerHandle(config.worker, child);
  }

  get exited(): Promise<void> {
    return this.done;
  }

  get output(): string {
    return this.stderr;
  }

  send(message: ToWorker): void {
    if (this.child.connected) this.child.send(message);
  }

  pause(): void {
    if (this.depth++ === 0) this.signal("SIGSTOP");
  }

  resume(): void {
    this.depth = Math.max(0, this.depth - 1);
    if (this.depth === 0) this.signal("SIGCONT");
  }

  resumeAll(): void {
    this.depth = 0;
    this.signal("SIGCONT");
  }

  /** Continued first, so that a stopped worker dies too. */
  kill(): void {
    this.child.kill("SIGCONT");
    this.child.kill("SIGKILL");
  }

  private signal(signal: NodeJS.Signals): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
  }
}
