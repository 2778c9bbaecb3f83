import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * A CPU-quota cgroup for a server under test, as a container with `--cpus 0.5` or a Kubernetes CPU
 * limit of 500m gets: CFS throttling stops every thread of the process once the quota of a period is
 * used. cgroup v1 (a `cpu` hierarchy, `cpu.cfs_quota_us`) or v2 (`cpu.max`), whichever is mounted and
 * writable (root). The quota can be set and lifted while the process runs (`cap`, `uncap`): a limit or
 * a noisy neighbour arriving after a warm-up.
 */
export interface CpuQuota {
  /** "v1" or "v2": the cgroup version used. */
  readonly version: "v1" | "v2";
  readonly path: string;
  /** Puts a process in the group (its threads with it). */
  add(pid: number): void;
  /** Applies the quota: `cores` of CPU time per period (0.5: half a core). */
  cap(cores: number): void;
  /**
   * Puts the group ahead of the machine's other processes while they compete for a CPU (v1
   * `cpu.shares` 10,240, ten times a process's; v2 `cpu.weight` 1,000): on a busy machine the quota,
   * not the machine, is then what limits what is in it.
   */
  boost(): void;
  /** Lifts the quota (the group's processes keep running in it). */
  uncap(): void;
  /** Periods the group was throttled in, and for how long in all (ms), since it was made. */
  throttled(): { periods: number; ms: number };
  /** Removes the group; its processes must have exited or left (`leave`). */
  remove(): void;
  /** Moves a process of the group back to the top of the hierarchy. */
  leave(pid: number): void;
}

const V1_ROOTS = ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"];
const V2_ROOT = "/sys/fs/cgroup";
const PERIOD_US = 100_000;

/** Thrown when no CPU cgroup can be made here: a capped measurement cannot run, and says so. */
export class NoCpuCgroupError extends Error {
  constructor(detail: string) {
    super(`no writable CPU cgroup (v1 ${V1_ROOTS.join(" or ")}, or v2 ${V2_ROOT} with the cpu controller; needs root): ${detail}`);
    this.name = "NoCpuCgroupError";
  }
}

/** Makes a CPU cgroup named `name` (unique per run: the caller's pid in it is a good idea), with no quota yet. */
export function makeCpuQuota(name: string): CpuQuota {
  const v1 = V1_ROOTS.find((root) => existsSync(join(root, "cpu.cfs_quota_us")));
  const v2 = v1 === undefined && readIfExists(join(V2_ROOT, "cgroup.controllers"))?.split(" ").includes("cpu") === true;
  if (v1 === undefined && !v2) throw new NoCpuCgroupError("neither is mounted");
  const path = join(v1 ?? V2_ROOT, name);
  try {
    mkdirSync(path);
  } catch (err) {
    throw new NoCpuCgroupError(`mkdir ${path}: ${(err as Error).message}`);
  }
  const write = (file: string, value: string): void => writeFileSync(join(path, file), value);
  if (v1 !== undefined) write("cpu.cfs_period_us", String(PERIOD_US));
  return {
    version: v1 === undefined ? "v2" : "v1",
    path,
    add: (pid) => write("cgroup.procs", String(pid)),
    cap: (cores) => {
      const quota = String(Math.max(1_000, Math.round(cores * PERIOD_US)));
      if (v1 === undefined) write("cpu.max", `${quota} ${PERIOD_US}`);
      else write("cpu.cfs_quota_us", quota);
    },
    boost: () => (v1 === undefined ? write("cpu.weight", "1000") : write("cpu.shares", "10240")),
    uncap: () => (v1 === undefined ? write("cpu.max", `max ${PERIOD_US}`) : write("cpu.cfs_quota_us", "-1")),
    throttled: () => {
      const stat = readFileSync(join(path, "cpu.stat"), "utf8");
      const field = (name: string): number => Number(new RegExp(`^${name} (\\d+)$`, "m").exec(stat)?.[1] ?? 0);
      // v1: throttled_time in ns; v2: throttled_usec.
      return { periods: field("nr_throttled"), ms: v1 === undefined ? field("throttled_usec") / 1000 : field("throttled_time") / 1e6 };
    },
    remove: () => rmdirSync(path),
    leave: (pid) => writeFileSync(join(v1 ?? V2_ROOT, "cgroup.procs"), String(pid)),
  };
}

function readIfExists(file: string): string | undefined {
  try {
    return readFileSync(file, "utf8").trim();
  } catch {
    return undefined;
  }
}
