// The gateway's cost table by removal (`pnpm bench gateway` runs it beside gateway.bench.ts): the same
// credential writes as gateway.bench.ts's (64 keep-alive clients, each writing its own record under
// its own lease's credential, PostgreSQL), through the full built gateway and through one copy of it
// per layer with that layer taken out (gateway-layers.ts), each a process under the same CPU quota,
// in interleaved rounds. A layer's cost is the median over rounds of the full build's CPU per write
// minus the copy's in the same round; its share, that cost over the full build's median.
import { rmSync } from "node:fs";
import { Pool } from "undici";
import { startPostgres } from "@fenced/servers";
import { credentialWrites } from "./credential-writes.js";
import { gatewayWithout, LAYERS, type Layer } from "./gateway-layers.js";
import { scopeCost } from "./gateway-scope.js";
import { emit, measure, median, round3, type Op } from "./measure.js";
import { cpuQuotaSetting, gatewayArgs, nodeArgs, type ServerProcess, startServer, unitNodeFlags } from "./server-process.js";

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 3_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
/** Before each measurement: an idle gateway's young generation has shrunk, and grows back within about a second. */
const WARM_MS = 1_500;
const CONCURRENCY = 64;
const POOL_SIZE = 16;
const NODE_ARGS = [...unitNodeFlags(), ...nodeArgs("BENCH_GATEWAY_NODE_ARGS")];
const CPU_QUOTA = cpuQuotaSetting(0.5);
/** BENCH_LAYERS: the layers to measure, comma-separated (default: all of LAYERS). */
const ONLY = process.env.BENCH_LAYERS?.split(",");
const unknown = ONLY?.filter((name) => !LAYERS.some((l) => l.name === name)) ?? [];
if (unknown.length > 0)
  throw new Error(`BENCH_LAYERS names no layer ${unknown.join(", ")}: the layers are ${LAYERS.map((l) => l.name).join(", ")}`);
const FULL: Layer = { name: "full", removed: "nothing: the gateway as built", patches: [] };

// First, before any server starts: the one layer resolved only in process.
const scope = scopeCost();
emit({
  bench: "gateway-scope-in-process",
  scopeNsPerRequest: scope.scopeNs,
  idOnlyNsPerRequest: scope.idOnlyNs,
  lazyScopeCouldSaveNs: scope.scopeNs - scope.idOnlyNs,
  of: "the request scope middleware (id, span, AsyncLocalStorage) against one that sets only the request id, 200,000 calls a round, median of 9 rounds, no OpenTelemetry SDK registered",
});

const postgres = await startPostgres();
const servers: ServerProcess[] = [];
/** The patched copies' folders, removed at the end. */
const copies: string[] = [];
const pools: Pool[] = [];
try {
  const writes = credentialWrites(CONCURRENCY);
  const layers = [FULL, ...LAYERS.filter((l) => ONLY === undefined || ONLY.includes(l.name))];
  // The full build runs from a copy too, made as the others are with nothing patched, so that a pair
  // differs in its layer and in nothing else (where the files live, how they resolve their imports).
  const cliOf = (layer: Layer): string => {
    const copy = gatewayWithout(layer);
    copies.push(copy.dir);
    return copy.cli;
  };
  const start = (layer: Layer): Promise<ServerProcess> =>
    startServer(
      [...NODE_ARGS, cliOf(layer), ...gatewayArgs(postgres.url, `bench_layers_${layer.name}`, POOL_SIZE), ...(layer.flags ?? [])],
      writes.gatewayEnv,
      CPU_QUOTA,
    );
  const ops = new Map<string, { server: ServerProcess; op: Op }>();
  for (const layer of layers) {
    const server = await start(layer);
    servers.push(server);
    const { pool, op } = writes.writesTo(server.port, `the gateway without ${layer.name}`);
    pools.push(pool);
    ops.set(layer.name, { server, op });
    await measure(op, CONCURRENCY, 3_000); // warm: JIT, the young generation, prepared statements
  }
  // Every copy, the full build's included, is measured once a round, in an order that turns each round,
  // after a warm-up long enough to undo an idle process's shrunken young generation: a copy measured
  // more often than the others (as in pairs against one full build) runs warmer and looks cheaper.
  const measureOne = async (name: string): Promise<{ us: number; opsPerSec: number }> => {
    const { server, op } = ops.get(name) as { server: ServerProcess; op: Op };
    await measure(op, CONCURRENCY, WARM_MS);
    const cpu0 = server.cpuSeconds();
    const r = await measure(op, CONCURRENCY, DURATION_MS);
    return { us: ((server.cpuSeconds() - cpu0) * 1e6) / r.ops, opsPerSec: r.opsPerSec };
  };
  const removed = layers.slice(1);
  const pairs = new Map<string, { full: number; without: number; fullOps: number; withoutOps: number }[]>(removed.map((l) => [l.name, []]));
  for (let round = 0; round < ROUNDS; round++) {
    const seen = new Map<string, { us: number; opsPerSec: number }>();
    for (let k = 0; k < layers.length; k++) {
      const layer = layers[(k + round) % layers.length] as Layer;
      const r = await measureOne(layer.name);
      seen.set(layer.name, r);
      emit({ bench: "gateway-layer-round", layer: layer.name, round, cpuUsPerWrite: Math.round(r.us), opsPerSec: Math.round(r.opsPerSec) });
    }
    const full = seen.get(FULL.name) as { us: number; opsPerSec: number };
    for (const layer of removed) {
      const without = seen.get(layer.name) as { us: number; opsPerSec: number };
      pairs.get(layer.name)?.push({ full: full.us, without: without.us, fullOps: full.opsPerSec, withoutOps: without.opsPerSec });
    }
  }
  const fullUs = median((pairs.get(removed[0]?.name ?? "") ?? []).map((p) => p.full));
  const table: Record<string, number> = {};
  for (const layer of removed) {
    const mine = pairs.get(layer.name) ?? [];
    const savedUs = median(mine.map((p) => p.full - p.without));
    table[layer.name] = Math.round(savedUs);
    emit({
      bench: "gateway-layer",
      layer: layer.name,
      removed: layer.removed,
      savedUsPerWrite: Math.round(savedUs),
      share: round3(savedUs / fullUs),
      withoutCpuUsPerWrite: Math.round(median(mine.map((p) => p.without))),
      fullCpuUsPerWrite: Math.round(median(mine.map((p) => p.full))),
      withoutOpsPerSec: Math.round(median(mine.map((p) => p.withoutOps))),
      fullOpsPerSec: Math.round(median(mine.map((p) => p.fullOps))),
      savedPerRoundUs: mine.map((p) => Math.round(p.full - p.without)),
      serverCpuQuota: CPU_QUOTA === 0 ? "uncapped" : `${CPU_QUOTA} core each`,
      rounds: ROUNDS,
    });
  }
  emit({
    bench: "gateway-layers",
    fullCpuUsPerWrite: Math.round(fullUs),
    savedUsPerWrite: table,
    route: "not removable: express's router and app are what every request runs through",
    note: "each layer's saving by removal, the median over rounds of the full build's CPU per write minus the copy's in the same round; savings overlap (scope includes span) and need not add up to the whole",
  });
} finally {
  await Promise.all(pools.map((p) => p.close()));
  await Promise.all(servers.map((s) => s.stop()));
  await postgres.stop();
  for (const dir of copies) rmSync(dir, { recursive: true, force: true });
}
