import { setTimeout as sleep } from "node:timers/promises";
import type { Fence } from "@fenced/fence";
import type { CounterAccess } from "./counter-store.js";
import { RegistrationRefusedError } from "./gateway-client.js";
import { headOf, increment, type Call, type CallStep, type OpEvent } from "./history.js";
import type { LeaseSource, WorkerLease } from "./lease-source.js";
import { classify, errorLabel } from "./outcomes.js";
import type { Random } from "./random.js";

/**
 * One operation of a worker: acquire → (register) → read → increment → write → release, each call
 * timed for liveness, and its outcome reported by type (outcomes.ts). No error of a backend ends the
 * worker: every one ends its operation with an outcome, and the worker goes on with the next.
 */

export interface OperationContext {
  readonly worker: number;
  readonly leases: LeaseSource;
  readonly store: CounterAccess;
  /** Fence-on-acquire done by the worker itself ("full" without a gateway): one fence, or every fence of a pair's lease in one call. */
  readonly register: ((fence: Fence | readonly Fence[]) => Promise<void>) | undefined;
  readonly ttlMs: number;
  /** No lease by then (from the start of the acquisition) ends the operation as unavailable. */
  readonly acquireDeadlineMs: number;
  readonly workMs: number;
  readonly rnd: Random;
  readonly now: () => number;
  readonly stopping: AbortSignal;
  readonly emit: (event: OpEvent) => Promise<void>;
  /** Between the read and the write: waits there while the controller stops the worker (pause-in-rmw). */
  readonly betweenReadAndWrite: () => Promise<void>;
}

const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));

export async function runOperation(ctx: OperationContext, op: string, resource: string, key: string): Promise<void> {
  const stamp = (): { op: string; worker: number; resource: string; mono: number; wall: number } => ({
    op,
    worker: ctx.worker,
    resource,
    mono: ctx.now(),
    wall: Date.now(),
  });
  const calls: Call[] = [];
  const timed = async <T>(step: CallStep, call: () => Promise<T>, into: Call[] = calls): Promise<T> => {
    const start = ctx.now();
    try {
      return await call();
    } finally {
      into.push({ step, start, end: ctx.now() });
    }
  };

  await ctx.emit({ type: "invoke", ...stamp() });
  let lease: WorkerLease;
  try {
    const signal = AbortSignal.any([ctx.stopping, AbortSignal.timeout(ctx.acquireDeadlineMs)]);
    lease = await timed("acquire", () => ctx.leases.acquire(resource, ctx.ttlMs, signal));
  } catch (err) {
    const error = errorLabel(err);
    if (err instanceof RegistrationRefusedError) {
      // The lock granted a lease with this token; a store refused to register it and the gateway
      // released it at once, without disclosing its holder id. It is an acquisition all the same.
      const token = err.token.toString();
      await ctx.emit({ type: "acquired", ...stamp(), token, holder: null });
      await ctx.emit({ type: "fail", ...stamp(), token, reason: "stale", message: messageOf(err), error, calls });
      return;
    }
    const c = classify(err, false);
    await ctx.emit({ type: "fail", ...stamp(), reason: c.outcome === "fail" ? c.reason : "error", message: messageOf(err), error, calls });
    return;
  }
  const token = lease.fence.token.toString();
  // The public holder id, never the secret value: the history is written to disk.
  const held = { token, holder: lease.fence.holder };
  await ctx.emit({ type: "acquired", ...stamp(), ...held });
  let writeStart: number | undefined;
  try {
    const register = ctx.register;
    if (register !== undefined && !lease.registered) await timed("register", () => register(lease.fence));
    const { doc, version } = await timed("read", () => ctx.store.read(key));
    await ctx.emit({ type: "read", ...stamp(), token, count: doc.count, head: headOf(doc) });
    await sleep(ctx.rnd.between(0, ctx.workMs));
    await ctx.betweenReadAndWrite();
    const next = increment(doc, op, token);
    writeStart = ctx.now();
    await timed("write", () => ctx.store.write(key, next, lease, version));
    await ctx.emit({ type: "ok", ...stamp(), ...held, read: doc.count, wrote: next.count, writeStart, calls });
  } catch (err) {
    const c = classify(err, writeStart !== undefined);
    const about = { ...held, message: messageOf(err), error: errorLabel(err), calls };
    if (c.outcome === "fail") await ctx.emit({ type: "fail", ...stamp(), ...about, reason: c.reason });
    // The write was sent and its answer lost: it may have landed.
    else await ctx.emit({ type: "info", ...stamp(), ...about, writeStart: writeStart ?? ctx.now() });
  } finally {
    const releases: Call[] = [];
    await timed("release", () => lease.release(), releases).catch(() => undefined);
    await ctx.emit({ type: "released", ...stamp(), calls: releases });
  }
}
