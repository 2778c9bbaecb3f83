import { readdirSync, readFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { setTimeout as delay } from "node:timers/promises";
import { makeCpuQuota, startPostgres, type CpuQuota, type StartedPostgres } from "@fenced/servers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mintFenceCredential, type CredentialKey } from "@fenced/fence/credentials";
import { startCli, type Child } from "./cli-test-support.js";
import { API_KEYS, bearer, FENCE_KEYS, KEYS } from "./test-support.js";

/**
 * The gateway under a CPU limit (as `--cpus` or a Kubernetes CPU limit) serves what it can: 64
 * clients in a closed loop — each sends its next write when the last is answered, so at most 64 are
 * in flight and the load is never more than the gateway carries — are neither refused nor queued.
 * The quota arrives after an uncapped warm-up, as a limit or a noisy neighbour does; CFS throttling
 * then stops the process for most of every 100 ms period, which its event loop saw as lateness of
 * its own: admission refused several times what it served (the storm, docs/benchmarks.md).
 *
 * The same gateway with admission control off runs beside it under the same loop and quota: the
 * machine as busy as it is for the judged one, and its figures beside the judged one's in a failure.
 * Each is a process in a cgroup of its own (cgroup v1 or v2; as root — CI runs as root — and the
 * test fails where none can be made: it cannot judge without one).
 */
const CLIENTS = 64;
/**
 * A quarter of a core each: two gateways at half a core, PostgreSQL and the clients are more than
 * this machine's two cores, and at half a core the quota did not bind (0–12 of 25 periods throttled).
 */
const CORES = 0.25;
/**
 * Judged rounds; each an uncapped warm-up, then the quota. Each round is a chance for the storm
 * (docs/benchmarks.md: it refused in some rounds of a run and not in others).
 */
const ROUNDS = 10;
const WARM_MS = 700;
/** The first round's warm-up (that round is not judged). */
const WARMUP_MS = 6_000;
const CAPPED_MS = 2_000;
/** The capped window's first part is not counted: the quota's first periods (the throttling starts). */
const SETTLE_MS = 300;

type Side = "on" | "off";
interface Gateway {
  readonly child: Child;
  readonly port: number;
  readonly quota: CpuQuota;
}

let postgres: StartedPostgres;
const gateways: Partial<Record<Side, Gateway>> = {};
/**
 * The clients (this process) and PostgreSQL, in a group of their own ahead of the machine's other
 * processes, as the gateways are: on a busy machine (CI beside two CPU hogs) the gateways' quota is
 * then what limits the writes, not a client or a database waiting for a CPU.
 */
let rig: CpuQuota | undefined;

/** The PostgreSQL server process listening on `url`'s port (its command line names the port). */
function postmasterOf(url: string): number {
  const port = new URL(url).port;
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    let args: string[];
    try {
      args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    } catch {
      continue;
    }
    if (args[0]?.endsWith("postgres") === true && args.includes(`port=${port}`)) return Number(pid);
  }
  throw new Error(`no PostgreSQL process listens on port ${port}`);
}

beforeAll(async () => {
  rig = makeCpuQuota(`fenced-quota-test-${process.pid}-rig`);
  rig.boost();
  rig.add(process.pid);
  postgres = await startPostgres({ faults: true });
  // Before the gateways connect: each connection's backend is forked into its server's group.
  rig.add(postmasterOf(postgres.url));
  const start = async (side: Side): Promise<Gateway> => {
    const quota = makeCpuQuota(`fenced-quota-test-${process.pid}-${side}`);
    const child = startCli(
      ["--port", "0", "--postgres", postgres.url, "--postgres-schema", `quota_${side}`, ...(side === "off" ? ["--no-admission"] : [])],
      {
        FENCED_GATEWAY_API_KEYS: JSON.stringify(API_KEYS),
        FENCED_GATEWAY_FENCE_KEYS: JSON.stringify(FENCE_KEYS.map((k) => ({ id: k.id, secret: Buffer.from(k.secret).toString("base64") }))),
      },
    );
    const port = Number((await child.waitFor("listening")).port);
    quota.add(child.process.pid as number);
    quota.boost();
    return { child, port, quota };
  };
  gateways.on = await start("on");
  gateways.off = await start("off");
}, 300_000);

afterAll(async () => {
  for (const gw of Object.values(gateways)) {
    gw.child.process.kill("SIGKILL");
    await gw.child.exited;
    gw.quota.remove();
  }
  rig?.leave(process.pid);
  await postgres?.stop();
  // PostgreSQL's backends leave the group as they exit, once their server is gone: its removal waits for them.
  for (const until = Date.now() + 30_000; rig !== undefined; await delay(50)) {
    try {
      rig.remove();
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EBUSY" || Date.now() > until) throw err;
    }
  }
}, 120_000);

/** Client i's write: an ordinary API key's, under the fence credential of resource i (the gateway checks its signature each time). */
function writeOf(i: number): { path: string; headers: Record<string, string> } {
  const credential = mintFenceCredential({ resource: `svc/q${i}`, token: 1n, holder: `client-${i}` }, FENCE_KEYS[0] as CredentialKey, {
    expiresAt: Date.now() + 3_600_000,
  });
  return {
    path: `/v1/records/svc/q${i}`,
    headers: { ...bearer(KEYS.service), "fencing-credential": credential, "content-type": "application/json" },
  };
}

/** A closed loop of CLIENTS writers, each its own write again and again, until `stop`; answers counted by status from `stop.from`. */
function closedLoop(port: number, stop: { done: boolean; from: number }): Promise<{ ok: number; other: Record<number, number> }> {
  const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
  const counts = { ok: 0, other: {} as Record<number, number> };
  const writes = Array.from({ length: CLIENTS }, (_, i) => writeOf(i));
  const put = (i: number, n: number): Promise<number> =>
    new Promise((resolve, reject) => {
      const { path, headers } = writes[i] as ReturnType<typeof writeOf>;
      const body = JSON.stringify({ n });
      const req = request({ host: "127.0.0.1", port, method: "PUT", path, headers, agent }, (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
        res.on("error", reject);
      });
      req.on("error", reject);
      req.end(body);
    });
  const writer = async (i: number): Promise<void> => {
    for (let n = 0; !stop.done; n++) {
      const status = await put(i, n);
      if (performance.now() < stop.from) continue;
      if (status === 200) counts.ok++;
      else counts.other[status] = (counts.other[status] ?? 0) + 1;
    }
  };
  return Promise.all(Array.from({ length: CLIENTS }, (_, i) => writer(i)))
    .then(
      () => counts,
      (err: unknown) => Promise.reject(err instanceof Error ? err : new Error(String(err))),
    )
    .finally(() => agent.destroy());
}

type Round = Record<Side, { okPerSec: number; other: Record<number, number>; throttledPeriods: number; cpuUsPerOk: number }> & {
  /** The on-gateway's records limit at the round's end. */
  limit: number;
};

function cpuMs(gw: Gateway): number {
  const stat = readFileSync(`/proc/${gw.child.process.pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

/**
 * One round: both gateways at once (so that whatever else this machine runs slows both alike), each
 * uncapped under its own closed loop, then capped under the same loop; accepted writes per second
 * while capped.
 */
async function round(gw: Record<Side, Gateway>, warmMs = WARM_MS): Promise<Round> {
  const sides = ["on", "off"] as const;
  for (const side of sides) gw[side].quota.uncap();
  const stop = { done: false, from: Infinity };
  const loops = sides.map((side) => closedLoop(gw[side].port, stop));
  await delay(warmMs);
  const throttled = sides.map((side) => gw[side].quota.throttled().periods);
  const cpu0 = sides.map((side) => cpuMs(gw[side]));
  for (const side of sides) gw[side].quota.cap(CORES);
  stop.from = performance.now() + SETTLE_MS;
  await delay(CAPPED_MS);
  stop.done = true;
  const counts = await Promise.all(loops);
  const result = {} as Round;
  for (const [k, side] of sides.entries()) {
    gw[side].quota.uncap();
    const c = counts[k] as Awaited<ReturnType<typeof closedLoop>>;
    result[side] = {
      okPerSec: Math.round(c.ok / ((CAPPED_MS - SETTLE_MS) / 1000)),
      other: c.other,
      throttledPeriods: gw[side].quota.throttled().periods - (throttled[k] as number),
      cpuUsPerOk: Math.round(((cpuMs(gw[side]) - (cpu0[k] as number)) * 1000) / Math.max(1, c.ok)),
    };
  }
  // Read uncapped, its CPU in no round's figures (the limit is the same as when the loop stopped).
  const metrics = await (await fetch(`http://127.0.0.1:${gw.on.port}/metrics`)).text();
  result.limit = Number(/^fenced_gateway_admission_limit\{route="records"\} (\S+)$/m.exec(metrics)?.[1]);
  return result;
}

describe("under a CPU quota", () => {
  it(`serves ${CLIENTS} closed-loop clients under a CPU quota, refusing none and queueing none in any round`, async () => {
    const gw = gateways as Record<Side, Gateway>;
    // A fresh gateway runs at about half speed until V8 has optimised its hot paths, and V8 compiles
    // them on threads of the process, under its quota once capped: a first round, not judged.
    await round(gw, WARMUP_MS);
    const rounds: Round[] = [];
    for (let r = 0; r < ROUNDS; r++) rounds.push(await round(gw));
    const metrics = await (await fetch(`http://127.0.0.1:${gw.on.port}/metrics`)).text();
    const seen = `${JSON.stringify(rounds)}\n${metrics
      .split("\n")
      .filter((l) => /^fenced_gateway_(requests_shed_total|admission_limit\{route="records"|event_loop)/.test(l))
      .join("\n")}`;
    // The quota bit (the condition of the test): each capped phase of the judged gateway was throttled.
    for (const r of rounds) expect(r.on.throttledPeriods, seen).toBeGreaterThan(0);
    for (const r of rounds) {
      // A closed loop is never more than the gateway carries: every refusal is of a write it could
      // serve (the storm refused several times what it served; a few, at most, as a tick may misjudge).
      const refused = Object.values(r.on.other).reduce((a, b) => a + b, 0) / ((CAPPED_MS - SETTLE_MS) / 1000);
      expect(refused / r.on.okPerSec, seen).toBeLessThanOrEqual(0.01);
    }
    // Nor is any queued: the limit, read after each round, is above the clients, so none waited for
    // a slot. The limit learns only from windows with at least half of it in flight (limit.ts), so
    // from its start at admission.maxConcurrency (512) this loop cannot lower it: the line holds the
    // defaults and that rule, as a limit of 2 (`--max-concurrency 2`) fails it. How many writes each
    // side served is not judged: on this busy machine two identical gateways side by side served
    // 0.53–0.81 of each other in their worst round, and on ÷ off, medians over ten rounds, read
    // 0.74–0.98 over six runs of e28c5d7 and 994e428, and 0.75 and 0.85 with the on side's limit
    // fixed at 2 and at 8 (both sides CPU-bound throughout: it measured CPU per write). `pnpm bench
    // overload`'s closed loop of 64 measures that (on ÷ off ≥ 0.95; quiet, interleaved rounds).
    for (const r of rounds) expect(r.limit, seen).toBeGreaterThanOrEqual(CLIENTS);
  }, 180_000);
});
