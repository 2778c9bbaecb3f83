// A server process of the benchmarks: spawned with plain node, ready once it prints
// {"msg":"listening","port":…} on stdout, and read from /proc for its memory and CPU time.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { appendFileSync, readFileSync, writeFileSync } from "node:fs";
import { makeCpuQuota, type CpuQuota } from "@fenced/servers";

/** USER_HZ: the unit of /proc's CPU times. */
export const CLK_TCK = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;
/** BENCH_SERVER_LOG=<file>: every server's stdout appended there (with --trace-gc in its node flags, its collections). */
const LOG = process.env.BENCH_SERVER_LOG;

/**
 * The node flags the gateway's shipped systemd unit starts it with (its ExecStart, between node and
 * the gateway's cli.js): the benchmarks run the gateway as an operator does.
 */
export function unitNodeFlags(): string[] {
  const unit = readFileSync(new URL("../packages/gateway/ops/fenced-gateway.service", import.meta.url), "utf8");
  const words = /^ExecStart=(.*)$/m.exec(unit)?.[1]?.split(" ") ?? [];
  const cli = words.findIndex((w) => w.endsWith("/cli.js"));
  if (cli < 1) throw new Error("the gateway's unit has no ExecStart=<node> … cli.js line");
  return words.slice(1, cli);
}

/**
 * A built gateway's flags for the benches' writes: any free port, info logs, records in `schema` on
 * PostgreSQL at `postgresUrl`, with a pool of `poolSize` connections (the gateway's default without).
 */
export function gatewayArgs(postgresUrl: string, schema: string, poolSize?: number): string[] {
  const pool = poolSize === undefined ? [] : ["--postgres-pool-size", String(poolSize)];
  return ["--port", "0", "--log-level", "info", "--postgres", postgresUrl, "--postgres-schema", schema, ...pool];
}

/** Node flags from an environment variable (e.g. BENCH_GATEWAY_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/gw"), split at spaces. */
export const nodeArgs = (variable: string): string[] => (process.env[variable] ?? "").split(" ").filter((a) => a !== "");

export interface ServerProcess {
  readonly port: number;
  /** Resident memory now and its peak since start (or since resetPeak), in MiB, from /proc. */
  rssMb(): { now: number; peak: number };
  resetPeak(): void;
  /** User + system CPU time the process has used, in seconds. */
  cpuSeconds(): number;
  /**
   * Read and write system calls the process has made (/proc/<pid>/io: syscr, syscw). Node writes to
   * and reads from sockets with read/write/writev, all counted, so under load — nothing else written —
   * their growth per request is its socket reads and writes: to the client and to the database.
   */
  syscalls(): { reads: number; writes: number };
  /** Its CPU-quota cgroup, when started with `cpuQuota` (the quota applied; `uncap` and `cap` change it). */
  readonly quota: CpuQuota | undefined;
  stop(): Promise<void>;
}

/**
 * BENCH_CPU_QUOTA: the cores each server under test gets (a cgroup of its own, CFS quota per 100 ms
 * period, as `--cpus`); default `fallback`; 0 runs them uncapped. A capped run where no CPU cgroup
 * can be made throws NoCpuCgroupError: its figures would be the machine's, not the server's.
 */
export function cpuQuotaSetting(fallback: number): number {
  const cores = Number(process.env.BENCH_CPU_QUOTA ?? fallback);
  if (!(cores >= 0)) throw new Error(`BENCH_CPU_QUOTA must be a number of cores (0: uncapped), not ${process.env.BENCH_CPU_QUOTA}`);
  return cores;
}

/** A node process that prints {"msg":"listening","port":…} on stdout once it serves. */
export async function startServer(args: string[], env: Record<string, string>, cpuQuota = 0): Promise<ServerProcess> {
  const child: ChildProcess = spawn(process.execPath, args, {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const pid = child.pid ?? 0;
  const exited = (): boolean => child.exitCode !== null || child.signalCode !== null;
  let port: number;
  let quota: CpuQuota | undefined;
  try {
    port = await new Promise<number>((resolve, reject) => {
      let buffered = "";
      child.stdout?.on("data", (d: Buffer) => {
        if (LOG !== undefined) appendFileSync(LOG, d);
        buffered += d.toString();
        for (const line of buffered.split("\n")) {
          if (!line.includes('"msg":"listening"')) continue;
          try {
            resolve(Number((JSON.parse(line) as { port: number }).port));
          } catch (err) {
            reject(err instanceof Error ? err : new Error(String(err)));
          }
        }
        buffered = buffered.slice(buffered.lastIndexOf("\n") + 1);
      });
      child.once("exit", (code) => reject(new Error(`${args.join(" ")} exited with ${String(code)} before listening`)));
    });
    child.stdout?.resume();
    // In a group of its own, ahead of the machine's other processes while they compete for a CPU, so
    // that its quota, not the machine, is what limits it.
    quota = cpuQuota > 0 ? makeCpuQuota(`fenced-bench-${process.pid}-${pid}`) : undefined;
    quota?.add(pid);
    quota?.boost();
    quota?.cap(cpuQuota);
  } catch (err) {
    // A server that never became usable is not left running (nor its piped stdout keeping this process alive).
    if (!exited()) child.kill("SIGKILL");
    quota?.remove();
    throw err;
  }
  const status = (field: string): number =>
    Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) / 1024;
  return {
    port,
    rssMb: () => ({ now: Math.round(status("VmRSS")), peak: Math.round(status("VmHWM")) }),
    // "5" resets the peak resident set size (Linux ≥ 4.0), so each phase reports its own peak.
    resetPeak: () => writeFileSync(`/proc/${pid}/clear_refs`, "5"),
    cpuSeconds: () => {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      return (Number(fields[11]) + Number(fields[12])) / CLK_TCK; // utime, stime
    },
    syscalls: () => {
      const io = readFileSync(`/proc/${pid}/io`, "utf8");
      const field = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+)`, "m").exec(io)?.[1] ?? Number.NaN);
      return { reads: field("syscr"), writes: field("syscw") };
    },
    quota,
    stop: async () => {
      // A server that has exited already (crashed, or killed) emits no second "exit" to wait for.
      if (!exited()) {
        const gone = once(child, "exit");
        child.kill("SIGTERM");
        await gone;
      }
      quota?.remove();
    },
  };
}

/** `run` on a server started as startServer starts one, stopped after it whatever it did. */
export async function withServer<T>(
  args: string[],
  env: Record<string, string>,
  run: (server: ServerProcess) => Promise<T>,
  cpuQuota = 0,
): Promise<T> {
  const server = await startServer(args, env, cpuQuota);
  try {
    return await run(server);
  } finally {
    await server.stop();
  }
}
