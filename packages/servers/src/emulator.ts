// A store emulator that is a Node program from npm (dynalite for DynamoDB, azurite for Azure Blob),
// run as a process of its own on a free loopback port, with its data in a scratch folder so that a
// restart keeps it. The layers: this file starts, stops and faults the process; dynamodb.ts and
// azure-blob.ts name the program, its arguments and what "answers" means, and hand out clients.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ServerFaults } from "./faults.js";
import { freePort } from "./ports.js";
import { continueTree, killHard, spawnTracked, stopTree, type Spawned } from "./processes.js";

export interface EmulatorProgram {
  /** For messages and the scratch folder's name. */
  readonly name: string;
  /** The program's entry file (a path to a .js file). */
  readonly entry: string;
  /** Its arguments: listen on 127.0.0.1:`port`, keep its data under `dir`. */
  args(port: number, dir: string): string[];
  /** How long it may take to answer after it is spawned, on a busy machine. */
  readonly startTimeoutMs: number;
}

export interface RunningEmulator {
  /** http://127.0.0.1:port */
  readonly endpoint: string;
  /** The folder its data is kept in. */
  readonly dir: string;
  readonly faults: ServerFaults;
  /** Kills it and removes its data; idempotent. */
  stop(): Promise<void>;
}

/** Spawns `program` on a free port and resolves once it answers; its faults act on that one process. */
export async function startEmulator(program: EmulatorProgram): Promise<RunningEmulator> {
  const dir = await mkdtemp(join(tmpdir(), `fenced-${program.name}-`));
  let stopped: Promise<void> | undefined;
  let port = await freePort();
  let endpoint = `http://127.0.0.1:${port}`;
  let spawned: Spawned | undefined;
  let paused = false;
  let lastExited = false;
  const launch = async (): Promise<void> => {
    const started = spawnTracked(process.execPath, [program.entry, ...program.args(port, dir)]);
    spawned = started;
    const exited = (): boolean => started.child.exitCode !== null || started.child.signalCode !== null;
    const deadline = Date.now() + program.startTimeoutMs;
    for (;;) {
      lastExited = exited();
      if (lastExited) throw new Error(`${program.name} exited while starting at ${endpoint}\n${started.output()}`);
      if (await httpAnswers(endpoint)) return;
      if (Date.now() > deadline)
        throw new Error(
          `timed out after ${program.startTimeoutMs} ms waiting for ${program.name} to answer at ${endpoint}\n${started.output()}`,
        );
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  };
  // SIGKILL a paused process as it is: resuming it first would let it answer a request it holds.
  const kill = async (): Promise<void> => {
    if (spawned === undefined) return;
    paused = false;
    await killHard(spawned);
  };
  const alive = (): boolean => spawned !== undefined && spawned.child.exitCode === null && spawned.child.signalCode === null;
  // A port picked by freePort can be taken by someone else before the emulator binds it: an emulator
  // that exits while starting gets a new port, twice at most.
  for (let attempt = 1; ; attempt++) {
    try {
      await launch();
      break;
    } catch (err) {
      await kill();
      if (lastExited && attempt < 3) {
        port = await freePort();
        endpoint = `http://127.0.0.1:${port}`;
        continue;
      }
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
  }
  const faults: ServerFaults = {
    get running() {
      return alive();
    },
    get paused() {
      return paused;
    },
    // Never a signal to a process that exited: its pid may be another's by now.
    pause() {
      if (spawned === undefined || paused || !alive()) return;
      stopTree(spawned);
      paused = true;
    },
    resume() {
      if (spawned === undefined || !paused || !alive()) return;
      continueTree(spawned);
      paused = false;
    },
    kill,
    async restart() {
      if (stopped !== undefined) throw new Error(`${program.name} was stopped: it cannot restart`);
      await kill();
      await launch();
    },
  };
  return {
    get endpoint() {
      return endpoint;
    },
    dir,
    faults,
    stop: () =>
      (stopped ??= (async () => {
        await kill();
        await rm(dir, { recursive: true, force: true });
      })()),
  };
}

/** Whether anything answers HTTP at `endpoint` within a second (any status: the emulator listens and serves). */
async function httpAnswers(endpoint: string): Promise<boolean> {
  try {
    const res = await fetch(endpoint, { signal: AbortSignal.timeout(1_000) });
    await res.body?.cancel();
    return true;
  } catch {
    return false;
  }
}
