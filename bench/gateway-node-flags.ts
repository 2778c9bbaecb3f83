// One built gateway under several sets of node flags, side by side, each a process under the same
// CPU quota (half a core unless BENCH_CPU_QUOTA says otherwise), taking gateway.bench.ts's credential
// writes (64 keep-alive clients, each its own record under its own lease's credential, PostgreSQL) in
// interleaved rounds: CPU per write, writes/s and RSS, then RSS while idle. For memory work: V8's heap
// flags trade CPU for RSS, and two copies of one set (an A/A pair) show what a difference must exceed.
// Not part of `pnpm bench`:
//   BENCH_NODE_FLAG_SETS="unit:;g50:--heap-growing-percent=50;again:" \
//     scripts/supported-node.sh node --import tsx bench/gateway-node-flags.ts
// Each set is `name:flags` (flags split at spaces), started with the gateway's unit flags first
// (unitNodeFlags); the first set is the one the ratios are against. `name=<cli.js>:flags` runs another
// build for that set (a patched copy, as gateway-layers.ts makes); BENCH_GATEWAY_CLI, for every set.
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { Pool } from "undici";
import { mintFenceCredential, type CredentialKey } from "@fenced/fence/credentials";
import { startPostgres } from "@fenced/servers";
import { emit, measure, median, round3, type Op } from "./measure.js";
import { cpuQuotaSetting, startServer, unitNodeFlags, type ServerProcess } from "./server-process.js";

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 3_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
/** Before each measurement, as in gateway-layers.bench.ts: an idle gateway's young generation grows back. */
const WARM_MS = 1_500;
/** After the rounds, RSS is read while every gateway idles, at these seconds. */
const IDLE_AT_S = [0, 10, 30];
const CONCURRENCY = 64;
const SERVICE_KEY = "service-key-0123456789abcdef";
const FENCE_KEY: CredentialKey = { id: "bench", secret: randomBytes(32) };
const CLI = process.env.BENCH_GATEWAY_CLI ?? fileURLToPath(new URL("../packages/gateway/dist/cli.js", import.meta.url));
const SETS = (process.env.BENCH_NODE_FLAG_SETS ?? "unit:;again:").split(";").map((set) => {
  const at = set.indexOf(":");
  if (at < 1) throw new Error(`BENCH_NODE_FLAG_SETS: "${set}" is not name:flags`);
  const [name, cli = CLI] = set.slice(0, at).split("=") as [string, string?];
  return {
    name,
    cli,
    flags: set
      .slice(at + 1)
      .split(" ")
      .filter((f) => f !== ""),
  };
});
if (new Set(SETS.map((s) => s.name)).size !== SETS.length) throw new Error("BENCH_NODE_FLAG_SETS: each name once");
const CPU_QUOTA = cpuQuotaSetting(0.5);

const postgres = await startPostgres();
const servers = new Map<string, { server: ServerProcess; op: Op }>();
const pools: Pool[] = [];
try {
  const credentials = Array.from({ length: CONCURRENCY }, (_, w) =>
    mintFenceCredential({ resource: `cred-writer/${w}`, token: 1n, holder: `bench-${w}` }, FENCE_KEY, {
      expiresAt: Date.now() + 86_400_000,
    }),
  );
  for (const { name, cli, flags } of SETS) {
    const server = await startServer(
      [
        ...unitNodeFlags(),
        ...flags,
        cli,
        "--port",
        "0",
        "--log-level",
        "info",
        "--postgres",
        postgres.url,
        "--postgres-schema",
        `bench_flags_${name.replace(/\W/g, "_")}`,
        "--postgres-pool-size",
        "16",
      ],
      {
        FENCED_GATEWAY_API_KEYS: JSON.stringify([{ id: "service", key: SERVICE_KEY, resources: [""], keys: [""] }]),
        FENCED_GATEWAY_FENCE_KEYS: JSON.stringify([{ id: FENCE_KEY.id, secret: Buffer.from(FENCE_KEY.secret).toString("base64") }]),
      },
      CPU_QUOTA,
    );
    const pool = new Pool(`http://127.0.0.1:${server.port}`, { connections: CONCURRENCY, pipelining: 1 });
    pools.push(pool);
    const op: Op = async (w, i) => {
      const res = await pool.request({
        method: "PUT",
        path: `/v1/records/cred/${w}`,
        headers: {
          authorization: `Bearer ${SERVICE_KEY}`,
          "fencing-credential": credentials[w] as string,
          "content-type": "application/json",
        },
        body: JSON.stringify({ writer: w, seq: i, note: "invoice total updated" }),
      });
      await res.body.dump();
      if (res.statusCode !== 200) throw new Error(`the gateway with ${name}'s flags answered ${res.statusCode}`);
    };
    servers.set(name, { server, op });
    await measure(op, CONCURRENCY, 3_000); // warm: JIT, the young generation, prepared statements
  }
  // Every set once a round, in an order that turns each round (as gateway-layers.bench.ts).
  const seen = new Map(SETS.map(({ name }) => [name, [] as { us: number; opsPerSec: number; rssMb: number }[]]));
  for (let round = 0; round < ROUNDS; round++)
    for (let k = 0; k < SETS.length; k++) {
      const { name } = SETS[(k + round) % SETS.length] as (typeof SETS)[number];
      const { server, op } = servers.get(name) as { server: ServerProcess; op: Op };
      await measure(op, CONCURRENCY, WARM_MS);
      const cpu0 = server.cpuSeconds();
      const r = await measure(op, CONCURRENCY, DURATION_MS);
      const us = ((server.cpuSeconds() - cpu0) * 1e6) / r.ops;
      const rssMb = server.rssMb().now;
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
  const idleRssMb = new Map(SETS.map(({ name }) => [name, [] as number[]]));
  let idled = 0;
  for (const at of IDLE_AT_S) {
    await sleep((at - idled) * 1000);
    idled = at;
    for (const [name, { server }] of servers) idleRssMb.get(name)?.push(server.rssMb().now);
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
      rssMb: median(mine.map((m) => m.rssMb)),
      cpuRatio: round3(median(mine.map((m, i) => m.us / (first[i]?.us ?? Number.NaN)))),
      opsRatio: round3(median(mine.map((m, i) => m.opsPerSec / (first[i]?.opsPerSec ?? Number.NaN)))),
      ratioOf: `the median over rounds of this set's figure ÷ ${SETS[0]?.name ?? "?"}'s in the same round`,
      idleRssMb: Object.fromEntries(IDLE_AT_S.map((at, i) => [`${at}s`, idleRssMb.get(name)?.[i]])),
      serverCpuQuota: CPU_QUOTA === 0 ? "uncapped" : `${CPU_QUOTA} core each`,
      rounds: ROUNDS,
    });
  }
} finally {
  await Promise.all(pools.map((p) => p.close()));
  await Promise.all([...servers.values()].map(({ server }) => server.stop()));
  await postgres.stop();
}
