// One built gateway under several sets of node flags, side by side, each a process under the same
// CPU quota (half a core unless BENCH_CPU_QUOTA says otherwise), taking gateway.bench.ts's credential
// writes (64 keep-alive clients, each its own record under its own lease's credential, PostgreSQL) in
// interleaved rounds: CPU per write, writes/s and RSS, then RSS while idle. For memory work: V8's heap
// flags trade CPU for RSS, and two copies of one set (an A/A pair) show what a difference must exceed.
// Not part of `pnpm bench`. From the repository's root, after `pnpm build` (it measures dist/):
//   BENCH_NODE_FLAG_SETS="unit:;again:;g50:--heap-growing-percent=50" \
//     scripts/supported-node.sh node --import tsx bench/gateway-node-flags.ts > flags.jsonl
// JSON lines on stdout: one a set and round, then one a set with its medians and ratios.
// - BENCH_NODE_FLAG_SETS: `name:flags` separated by `;` (flags split at spaces), each started after
//   the gateway's unit flags (unitNodeFlags); the first set is the one the ratios are against.
//   `name=<cli.js>:flags` runs another build for that set: a patched copy of dist/, which must carry
//   its own copy of any dependency it patches (gateway-layers.ts's copies share node_modules).
// - BENCH_GATEWAY_CLI: another build for every set. BENCH_ROUNDS (7), BENCH_DURATION_MS (3,000).
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { Pool } from "undici";
import { startPostgres } from "@fenced/servers";
import { credentialWrites } from "./credential-writes.js";
import { emit, measure, median, round3, type Op } from "./measure.js";
import { cpuQuotaSetting, gatewayArgs, type ServerProcess, startServer, unitNodeFlags } from "./server-process.js";

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 3_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
/** Before each measurement, as in gateway-layers.bench.ts: an idle gateway's young generation grows back. */
const WARM_MS = 1_500;
/** After the rounds, RSS is read while every gateway idles, at these seconds after the last round. */
const IDLE_AT_S = [0, 10, 30];
const CONCURRENCY = 64;
const CLI = process.env.BENCH_GATEWAY_CLI ?? fileURLToPath(new URL("../packages/gateway/dist/cli.js", import.meta.url));
/** A set's PostgreSQL schema: its name, made an identifier. */
const schemaOf = (name: string): string => `bench_flags_${name.toLowerCase().replace(/\W/g, "_")}`;
const SETS = (process.env.BENCH_NODE_FLAG_SETS ?? "unit:;again:")
  .split(";")
  .map((set) => set.trim())
  .filter((set) => set !== "")
  .map((set) => {
    const colon = set.indexOf(":");
    const head = colon < 0 ? "" : set.slice(0, colon);
    const equals = head.indexOf("=");
    const name = (equals < 0 ? head : head.slice(0, equals)).trim();
    const cli = equals < 0 ? CLI : head.slice(equals + 1).trim();
    if (name === "" || cli === "") throw new Error(`BENCH_NODE_FLAG_SETS: "${set}" is not name:flags or name=<cli.js>:flags`);
    const flags = set
      .slice(colon + 1)
      .split(" ")
      .filter((f) => f !== "");
    return { name, cli, flags };
  });
if (SETS.length === 0) throw new Error("BENCH_NODE_FLAG_SETS: no set");
if (new Set(SETS.map((s) => schemaOf(s.name))).size !== SETS.length)
  throw new Error("BENCH_NODE_FLAG_SETS: each name once (compared as the schema names they become)");
const CPU_QUOTA = cpuQuotaSetting(0.5);

const postgres = await startPostgres();
const started: ServerProcess[] = [];
const servers = new Map<string, { server: ServerProcess; op: Op }>();
const pools: Pool[] = [];
try {
  const writes = credentialWrites(CONCURRENCY);
  for (const { name, cli, flags } of SETS) {
    const server = await startServer(
      [...unitNodeFlags(), ...flags, cli, ...gatewayArgs(postgres.url, schemaOf(name), 16)],
      writes.gatewayEnv,
      CPU_QUOTA,
    );
    started.push(server);
    const { pool, op } = writes.writesTo(server.port, `the gateway with ${name}'s flags`);
    pools.push(pool);
    servers.set(name, { server, op });
    await measure(op, CONCURRENCY, 3_000); // warm: JIT, the young generation, prepared statements
  }
  // Every set once a round: rounds 2r and 2r + 1 take the sets turned by r, forwards and then
  // backwards, so that no set always follows the same one (with two sets too).
  const seen = new Map(SETS.map(({ name }) => [name, [] as { us: number; opsPerSec: number; rssMb: number }[]]));
  const lastMeasured = new Map<string, number>();
  for (let round = 0; round < ROUNDS; round++)
    for (let k = 0; k < SETS.length; k++) {
      const turned = Math.floor(round / 2);
      const at = round % 2 === 0 ? k + turned : SETS.length - 1 - k + turned;
      const { name } = SETS[at % SETS.length] as (typeof SETS)[number];
      const { server, op } = servers.get(name) as { server: ServerProcess; op: Op };
      await measure(op, CONCURRENCY, WARM_MS);
      const cpu0 = server.cpuSeconds();
      const r = await measure(op, CONCURRENCY, DURATION_MS);
      const us = ((server.cpuSeconds() - cpu0) * 1e6) / r.ops;
      const rssMb = server.rssMb().now;
      lastMeasured.set(name, performance.now());
      seen.get(name)?.push({ us, opsPerSec: r.opsPerSec, rssMb });
      emit({
        bench: "gateway-node-flags-round",
        set: name,
        round,
        cpuUsPerWrite: Math.round(us),
        opsPerSec: Math.round(r.opsPerSec),
        rssMb,
      });
    }
  // Each sample with the seconds its set has idled: the sets measured early in the last round, longer.
  const idleRss = new Map(SETS.map(({ name }) => [name, [] as { idleS: number; rssMb: number }[]]));
  let idled = 0;
  for (const at of IDLE_AT_S) {
    await sleep((at - idled) * 1000);
    idled = at;
    for (const [name, { server }] of servers)
      idleRss.get(name)?.push({
        idleS: Math.round((performance.now() - (lastMeasured.get(name) ?? 0)) / 1000),
        rssMb: server.rssMb().now,
      });
  }
  const first = seen.get(SETS[0]?.name ?? "") ?? [];
  for (const { name, cli, flags } of SETS) {
    const mine = seen.get(name) ?? [];
    emit({
      bench: "gateway-node-flags",
      set: name,
      flags: [...unitNodeFlags(), ...flags].join(" "),
      cli,
      cpuUsPerWrite: Math.round(median(mine.map((m) => m.us))),
      opsPerSec: Math.round(median(mine.map((m) => m.opsPerSec))),
      rssEndOfRoundMb: median(mine.map((m) => m.rssMb)),
      cpuRatio: round3(median(mine.map((m, i) => m.us / (first[i]?.us ?? Number.NaN)))),
      opsRatio: round3(median(mine.map((m, i) => m.opsPerSec / (first[i]?.opsPerSec ?? Number.NaN)))),
      ratioOf: `the median over rounds of this set's figure ÷ ${SETS[0]?.name ?? "?"}'s in the same round`,
      idleRss: idleRss.get(name),
      serverCpuQuota: CPU_QUOTA === 0 ? "uncapped" : `${CPU_QUOTA} core each`,
      rounds: ROUNDS,
    });
  }
} finally {
  try {
    await Promise.allSettled(pools.map((p) => p.close()));
    await Promise.allSettled(started.map((server) => server.stop()));
  } finally {
    await postgres.stop();
  }
}
