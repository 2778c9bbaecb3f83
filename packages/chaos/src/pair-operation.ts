import { setTimeout as sleep } from "node:timers/promises";
import type { CounterDoc } from "./history.js";
import { headOf, increment, type Call, type CallStep, type PairOf } from "./history.js";
import { RegistrationRefusedError } from "./gateway-client.js";
import type { WorkerSetLease } from "./lease-source.js";
import type { OperationContext } from "./operation.js";
import { classify, errorLabel } from "./outcomes.js";

/**
 * One pair operation (`--pairs`): one lease of two resources → (register both) → read both counters
 * → increment each → write → release. On PostgreSQL both counters are written in one transaction
 * under both fences (all or none); on S3 each counter is written on its own, under its own resource's
 * fence, with an outcome of its own. Through a gateway the same: one `POST /v1/records` with both
 * credentials for records, a `PUT` per object with its resource's credential.
 *
 * The history holds the pair as two operations, its halves ("<op>a", "<op>b", in the lease's order),
 * each on its own resource with that resource's token, so that the checker judges every resource on
 * its own; their invoke events name the pair. What the two share — the lease, an atomic write, the
 * release — happens once and is reported on both halves; its calls are timed on the first only.
 */

const SUFFIXES = "ab";

interface Half {
  readonly id: string;
  readonly resource: string;
  readonly key: string;
  readonly calls: Call[];
  /** Set once the half's outcome (ok, fail, info) has been reported. */
  done: boolean;
  read?: { doc: CounterDoc; version: string | undefined };
  writeStart?: number;
}

const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));

export async function runPairOperation(
  ctx: OperationContext,
  op: string,
  resources: readonly string[],
  keys: readonly string[],
): Promise<void> {
  const acquireSet = ctx.leases.acquireSet;
  if (acquireSet === undefined) throw new Error("this lease source takes no leases of several resources");
  const halves: Half[] = resources.map((resource, i) => ({
    id: `${op}${SUFFIXES[i] ?? String(i)}`,
    resource,
    key: keys[i] ?? resource,
    calls: [],
    done: false,
  }));
  const first = halves[0] as Half;
  const writeAll = ctx.store.writeAll?.bind(ctx.store);
  const pair: PairOf = { op, halves: halves.map((h) => h.id), atomic: writeAll !== undefined };
  const stamp = (h: Half): { op: string; worker: number; resource: string; mono: number; wall: number } => ({
    op: h.id,
    worker: ctx.worker,
    resource: h.resource,
    mono: ctx.now(),
    wall: Date.now(),
  });
  const timed = async <T>(step: CallStep, into: Half, call: () => Promise<T>): Promise<T> => {
    const start = ctx.now();
    try {
      return await call();
    } finally {
      into.calls.push({ step, start, end: ctx.now() });
    }
  };

  for (const h of halves) await ctx.emit({ type: "invoke", ...stamp(h), pair });
  let lease: WorkerSetLease;
  try {
    const signal = AbortSignal.any([ctx.stopping, AbortSignal.timeout(ctx.acquireDeadlineMs)]);
    lease = await timed("acquire", first, () => acquireSet(resources, ctx.ttlMs, signal));
  } catch (err) {
    const about = { message: messageOf(err), error: errorLabel(err) };
    if (err instanceof RegistrationRefusedError) {
      // Through a gateway: the lock granted the lease, a store refused to register the fence of
      // err.resource and the gateway released the lease at once, without disclosing its holder id.
      // That resource's acquisition is recorded (its token was handed out); the other's token is not known.
      const token = err.token.toString();
      for (const h of halves) {
        if (h.resource === err.resource) await ctx.emit({ type: "acquired", ...stamp(h), token, holder: null });
        await ctx.emit({ type: "fail", ...stamp(h), reason: "stale", ...about, calls: h.calls });
      }
      return;
    }
    const c = classify(err, false);
    const reason = c.outcome === "fail" ? c.reason : "error";
    for (const h of halves) await ctx.emit({ type: "fail", ...stamp(h), reason, ...about, calls: h.calls });
    return;
  }
  const fenceOf = (i: number): WorkerSetLease["fences"][number] => {
    const fence = lease.fences[i];
    if (fence === undefined || fence.resource !== halves[i]?.resource)
      throw new Error(`the lease has no fence ${i} for ${halves[i]?.resource}`);
    return fence;
  };
  const held = (i: number): { token: string; holder: string } => ({ token: fenceOf(i).token.toString(), holder: fenceOf(i).holder });
  for (const [i, h] of halves.entries()) await ctx.emit({ type: "acquired", ...stamp(h), ...held(i) });

  /** Reports a half's outcome from the error that ended it: refused or unavailable, or unknown once its write was sent. */
  const failed = async (i: number, err: unknown): Promise<void> => {
    const h = halves[i] as Half;
    if (h.done) return;
    h.done = true;
    const c = classify(err, h.writeStart !== undefined);
    const about = { ...held(i), message: messageOf(err), error: errorLabel(err), calls: h.calls };
    if (c.outcome === "fail") await ctx.emit({ type: "fail", ...stamp(h), ...about, reason: c.reason });
    else await ctx.emit({ type: "info", ...stamp(h), ...about, writeStart: h.writeStart ?? ctx.now() });
  };
  const succeeded = async (i: number, next: CounterDoc): Promise<void> => {
    const h = halves[i] as Half;
    h.done = true;
    const read = h.read?.doc.count ?? next.count - 1;
    await ctx.emit({ type: "ok", ...stamp(h), ...held(i), read, wrote: next.count, writeStart: h.writeStart ?? ctx.now(), calls: h.calls });
  };

  try {
    const register = ctx.register;
    // Every fence of the lease in one call: on PostgreSQL one statement raises both ratchets, or neither.
    const fences = halves.map((_, i) => {
      const { resource, token, holder } = fenceOf(i);
      return { resource, token, holder };
    });
    if (register !== undefined) await timed("register", first, () => register(fences));
    for (const [i, h] of halves.entries()) {
      const read = await timed("read", h, () => ctx.store.read(h.key));
      h.read = read;
      await ctx.emit({ type: "read", ...stamp(h), token: held(i).token, count: read.doc.count, head: headOf(read.doc) });
    }
    await sleep(ctx.rnd.between(0, ctx.workMs));
    await ctx.betweenReadAndWrite();
    const nexts = halves.map((h, i) => increment(h.read?.doc ?? { count: 0, log: [] }, h.id, held(i).token));
    if (writeAll !== undefined) {
      const writeStart = ctx.now();
      for (const h of halves) h.writeStart = writeStart;
      const writes = halves.map((h, i) => ({
        key: h.key,
        doc: nexts[i] as CounterDoc,
        fence: fences[i] as (typeof fences)[number],
        credential: fenceOf(i).credential,
        version: h.read?.version,
      }));
      await timed("write", first, () => writeAll(writes));
      for (const [i] of halves.entries()) await succeeded(i, nexts[i] as CounterDoc);
    } else {
      // Each counter on its own, under its own resource's fence: one half may land and the other not.
      for (const [i, h] of halves.entries()) {
        h.writeStart = ctx.now();
        try {
          const { credential, ...fence } = fenceOf(i);
          const under = { fence, credential };
          await timed("write", h, () => ctx.store.write(h.key, nexts[i] as CounterDoc, under, h.read?.version));
          await succeeded(i, nexts[i] as CounterDoc);
        } catch (err) {
          await failed(i, err);
        }
      }
    }
  } catch (err) {
    for (const [i] of halves.entries()) await failed(i, err);
  } finally {
    const releases: Call[] = [];
    const start = ctx.now();
    await lease.release().catch(() => undefined);
    releases.push({ step: "release", start, end: ctx.now() });
    for (const [i, h] of halves.entries()) await ctx.emit({ type: "released", ...stamp(h), calls: i === 0 ? releases : [] });
  }
}
