// The shedding anchor of overload.bench.ts: the simplest server that sheds these writes
// (anchor-shed.js: bare node:http, one upsert a write on the same PostgreSQL, a pool of the gateway's
// default size, and every write over that many in flight refused at once with 503 overloaded), under
// the same generators at 0.5×, 2× and 4× of its own capacity. Its accepted ÷ capacity at 2× is what
// this machine, its generators and node-postgres give a minimal shedding Node server, and the gateway's
// figure is read against it: the gateway does more work a write (the fence, the credential), so its
// capacity is lower, and each of its refusals costs it more of a loop that also carries its writes.
import { fileURLToPath } from "node:url";
import { emit, median, round3 } from "./measure.js";
import type { JobResult } from "./open-loop.js";
import { cpuUsPerAnswer, openFigures, perSec, phase, type Load } from "./overload-phase.js";
import { withServer, type ServerProcess } from "./server-process.js";

const ANCHOR = fileURLToPath(new URL("./anchor-shed.js", import.meta.url));
/** The gateway's default --postgres-pool-size: the anchor's pool and its limit on writes in flight. */
const POOL_SIZE = 16;
const FRACTIONS = [0.5, 1, 2, 4, 10] as const;

export interface ShedAnchorSetup {
  /** The cores the anchor gets, in a cgroup of its own, as the gateways (0: uncapped). */
  readonly cpuQuota: number;
  readonly postgresUrl: string;
  /** The API key the generators' writes carry (the anchor checks it as a bearer token). */
  readonly apiKey: string;
  /** The closed loop that measures a capacity, and the open loop of the big key at a rate. */
  readonly closed: Load;
  readonly open: (ratePerSec: number) => Load;
  readonly rounds: number;
  readonly durationMs: number;
  readonly drainLimitMs: number;
}

/** Runs the shedding anchor; resolves with its accepted ÷ its capacity at each multiple (also emitted, with every phase). */
export async function runShedAnchor(setup: ShedAnchorSetup): Promise<Record<(typeof FRACTIONS)[number], number>> {
  // Its capacity without a limit (as the gateway's is measured with admission off), then its phases with it.
  const unlimited = await withAnchor(setup, Number.MAX_SAFE_INTEGER, async (server) => {
    await phase(server, [setup.closed], Math.min(3_000, 2 * setup.durationMs), setup.drainLimitMs);
    const rounds: { writesPerSec: number; cpuUsPerWrite: number }[] = [];
    for (let round = 0; round < setup.rounds; round++) {
      const m = await phase(server, [setup.closed], setup.durationMs, setup.drainLimitMs);
      const r = m.results[0] as JobResult;
      rounds.push({ writesPerSec: perSec(r.accepted, r), cpuUsPerWrite: cpuUsPerAnswer(m) });
    }
    return rounds;
  });
  const capacity = median(unlimited.map((r) => r.writesPerSec));
  emit({
    bench: "overload-anchor-shed-capacity",
    anchor: `node:http + pg, one upsert a write, writes over ${POOL_SIZE} in flight refused at once`,
    writesPerSec: capacity,
    of: `the anchor without its limit, closed loop, median of ${setup.rounds} rounds of ${setup.durationMs} ms`,
    cpuUsPerWrite: median(unlimited.map((r) => r.cpuUsPerWrite)),
    rounds: unlimited,
  });
  const at = { 0.5: Number.NaN, 1: Number.NaN, 2: Number.NaN, 4: Number.NaN, 10: Number.NaN };
  await withAnchor(setup, POOL_SIZE, async (server) => {
    await phase(server, [setup.closed], Math.min(3_000, 2 * setup.durationMs), setup.drainLimitMs);
    for (const fraction of FRACTIONS) {
      const rate = Math.max(50, Math.round(capacity * fraction));
      const m = await phase(server, [setup.open(rate)], setup.durationMs, setup.drainLimitMs);
      const r = m.results[0] as JobResult;
      const accepted = round3(perSec(r.acceptedInWindow, r) / capacity);
      at[fraction] = accepted;
      emit({
        bench: "overload-anchor-shed",
        anchor: `node:http + pg, writes over ${POOL_SIZE} in flight refused at once`,
        fraction,
        ratePerSec: rate,
        durationMs: setup.durationMs,
        acceptedOfCapacity: accepted,
        acceptedOf:
          "accepted/s while the load lasted ÷ the anchor's own capacity: the gateway's overload-goal figure, for the simplest shedding server",
        ...openFigures(r),
        serverCpuUsPerAnswer: cpuUsPerAnswer(m),
        serverCores: m.gatewayCores,
        machineBusyCores: m.machineBusyCores,
        listenOverflows: m.listenOverflows,
      });
    }
  });
  return at;
}

function withAnchor<T>(setup: ShedAnchorSetup, limit: number, run: (server: ServerProcess) => Promise<T>): Promise<T> {
  const env = {
    ANCHOR_POSTGRES_URL: setup.postgresUrl,
    ANCHOR_POOL_SIZE: String(POOL_SIZE),
    ANCHOR_LIMIT: String(limit),
    ANCHOR_API_KEY: setup.apiKey,
    ANCHOR_TABLE: "bench_overload_anchor_shed",
  };
  return withServer([ANCHOR], env, run, setup.cpuQuota);
}
