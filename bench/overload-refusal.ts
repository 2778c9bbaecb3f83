// One refusal's CPU, measured directly, for overload.bench.ts: a gateway whose records family admits
// one write and queues none, its one slot held by a write stuck on a stopped PostgreSQL (SIGSTOP), so
// that every other write is refused `queue-full` by the same early handler as under overload — beside
// bare node:http answering 503 at once (anchor-answer.js), in interleaved closed-loop rounds.
// overload-refusal-cost's figure is a residual (an overload phase's CPU less the accepted writes'
// share at their closed-loop cost), which charges the refusals with anything a write costs more under
// overload; this one is the refusals' own.
import { setTimeout as delay } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { request } from "undici";
import type { ServerFaults } from "@fenced/servers";
import type { JobResult } from "./open-loop.js";
import { answers, cpuUsPerAnswer, phase, type Load } from "./overload-phase.js";
import { startServer, type ServerProcess } from "./server-process.js";

const ANCHOR = fileURLToPath(new URL("./anchor-answer.js", import.meta.url));
/** The gateway's flags: one write let in at a time, none waiting. */
export const ONE_SLOT_FLAGS = ["--min-concurrency", "1", "--max-concurrency", "1", "--admission-queue", "0"] as const;

export interface RefusalRounds {
  /** Per round, CPU µs per answer: the gateway refusing every write, node:http answering 503. */
  readonly gatewayUs: number[];
  readonly anchorUs: number[];
  /** Answers other than a refusal, over the gateway's rounds (none expected: all but the held write are refused). */
  readonly notRefused: number;
}

/**
 * `gateway`: started with ONE_SLOT_FLAGS on `postgres`; `load`: a closed-loop load of writes it is
 * sent; `held`: the write that takes the one slot. Stops PostgreSQL while it measures, and resumes it.
 */
export async function measureRefusals(options: {
  gateway: ServerProcess;
  postgres: ServerFaults;
  load: Load;
  held: { path: string; headers: Record<string, string> };
  rounds: number;
  durationMs: number;
  drainLimitMs: number;
}): Promise<RefusalRounds> {
  const { gateway, postgres, load, rounds, durationMs, drainLimitMs } = options;
  const anchor = await startServer([ANCHOR], { ANCHOR_STATUS: "503" });
  // Warm: the refusal's path is compiled before it is measured (most of these are refused already).
  await phase(gateway, [load], 2_000, drainLimitMs);
  postgres.pause();
  const held = request(`http://127.0.0.1:${gateway.port}${options.held.path}`, {
    method: "PUT",
    headers: options.held.headers,
    body: JSON.stringify({ value: 1 }),
  }).then(
    (answer) => answer.body.dump(),
    () => undefined,
  );
  try {
    await holding(gateway);
    const result = { gatewayUs: [] as number[], anchorUs: [] as number[], notRefused: 0 };
    for (let round = 0; round < rounds; round++) {
      for (const server of round % 2 === 0 ? [gateway, anchor] : [anchor, gateway]) {
        const m = await phase(server, [load], durationMs, drainLimitMs);
        (server === gateway ? result.gatewayUs : result.anchorUs).push(cpuUsPerAnswer(m));
        const r = m.results[0] as JobResult;
        if (server === gateway) result.notRefused += answers(r) - r.shed;
      }
    }
    return result;
  } finally {
    postgres.resume();
    await held;
    await anchor.stop();
  }
}

/** Waits until the held write has the records family's one slot (its gauge reads 1). */
async function holding(gateway: ServerProcess): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const metrics = await (await request(`http://127.0.0.1:${gateway.port}/metrics`)).body.text();
    if (/^fenced_gateway_admission_inflight\{route="records"\} 1$/m.test(metrics)) return;
    await delay(25);
  }
  throw new Error("the held write never took the gateway's one slot");
}
