import { execFile } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import { promisify } from "node:util";
import type { StartedS3 } from "@fenced/servers";

/**
 * Tools for the S3 tests that act on the local radosgw itself (its processes, its cluster); those
 * that act on a client's requests, over any server, are in wire-test-support.ts.
 */

/**
 * Runs radosgw's garbage collection now (`radosgw-admin gc process --include-all`): radosgw deletes
 * the stored parts an abort released only after rgw_gc_obj_min_wait (2 h by default). Needs the
 * local cluster (startS3({ faults: true })): its ceph.conf is the `-c` argument of the radosgw
 * process that serves the endpoint.
 */
export async function collectGarbage(server: StartedS3): Promise<void> {
  if (server.source !== "local") throw new Error("collectGarbage needs the local radosgw: startS3({ faults: true })");
  const frontend = `endpoint=${new URL(server.endpoint).host} `;
  for (const pid of (await readdir("/proc")).filter((name) => /^\d+$/.test(name))) {
    const args = await readFile(`/proc/${pid}/cmdline`, "utf8").then(
      (line) => line.split("\0"),
      (): string[] => [], // a process that ended meanwhile
    );
    if (!args.some((arg) => arg.endsWith("radosgw")) || !args.some((arg) => arg.includes(frontend))) continue;
    const conf = args[args.indexOf("-c") + 1];
    if (conf === undefined) break;
    await promisify(execFile)("radosgw-admin", ["-c", conf, "gc", "process", "--include-all"], { timeout: 60_000 });
    return;
  }
  throw new Error(`no radosgw process serves ${server.endpoint}`);
}
