import { channel } from "node:diagnostics_channel";
import { performance } from "node:perf_hooks";
import { outcomeOf, type Outcome } from "@fenced/fence/internal";
import { SpanStatusCode, trace, type Attributes, type Span } from "@opentelemetry/api";
import type { HeldFence, LeaseLostError, LeaseLostKind, NodeFailure } from "./errors.js";

/**
 * What the lock tells an observer, without the caller's help: each operation on
 * `node:diagnostics_channel` (published only while someone subscribes) and as an OpenTelemetry span
 * through `@opentelemetry/api` (a no-op until an application registers an SDK). Nothing here decides
 * anything: an observer's failure or absence never changes what an operation does.
 */

/** The channels the lock publishes on (README, "Observing the lock"). */
export const LOCK_CHANNELS = {
  acquire: "fenced:lock:acquire",
  extend: "fenced:lock:extend",
  release: "fenced:lock:release",
  lost: "fenced:lock:lost",
} as const;

type LockOperation = "acquire" | "extend" | "release";

/** How an operation ended: `ok`, the code of the FencedError it threw, or `error` for any other failure. */
type LockOutcome = Outcome;

/** Published on fenced:lock:acquire, fenced:lock:extend and fenced:lock:release once the operation has ended. */
export interface LockOperationMessage {
  readonly operation: LockOperation;
  /** Every resource of the lease, in its order. */
  readonly resources: readonly string[];
  /** Each resource with its token: the lease's (extend, release) or the granted ones (acquire, absent when refused). */
  readonly fences?: readonly HeldFence[] | undefined;
  /** The lease's public holder id (absent when acquire was refused). */
  readonly holder?: string | undefined;
  /** The TTL asked for (acquire, extend). */
  readonly ttlMs?: number | undefined;
  /** Epoch ms until which the lease is valid after a successful acquire or extend. */
  readonly validUntil?: number | undefined;
  readonly outcome: LockOutcome;
  /** What the operation threw (absent when it succeeded). */
  readonly error?: unknown;
  readonly durationMs: number;
}

/** Published on fenced:lock:lost the moment a lease is known lost for a reason other than its own release. */
export interface LockLostMessage {
  readonly resources: readonly string[];
  readonly fences: readonly HeldFence[];
  readonly kind: Exclude<LeaseLostKind, "released">;
  readonly error: LeaseLostError;
}

const channels = {
  acquire: channel(LOCK_CHANNELS.acquire),
  extend: channel(LOCK_CHANNELS.extend),
  release: channel(LOCK_CHANNELS.release),
  lost: channel(LOCK_CHANNELS.lost),
};

const tracer = trace.getTracer("@fenced/lock");

/** What an operation knows before it runs. */
export interface LockCall {
  readonly operation: LockOperation;
  readonly resources: readonly string[];
  /** extend, release: the lease's fences (acquire learns them from its result). */
  readonly fences?: readonly HeldFence[] | undefined;
  readonly ttlMs?: number | undefined;
}

/** What an operation's result tells: the fences, holder and validity it ended with. Computed only when observed. */
export type LockResult = Pick<LockOperationMessage, "fences" | "holder" | "validUntil">;

function fenceAttributes(fences: readonly HeldFence[] | undefined): Attributes {
  if (fences === undefined) return {};
  const first = fences[0];
  return {
    ...(first === undefined ? {} : { "fenced.token": first.token.toString() }),
    ...(fences.length > 1 ? { "fenced.tokens": fences.map((f) => f.token.toString()) } : {}),
  };
}

function callAttributes(call: LockCall): Attributes {
  return {
    "fenced.resource": call.resources[0],
    ...(call.resources.length > 1 ? { "fenced.resources": [...call.resources] } : {}),
    ...(call.ttlMs === undefined ? {} : { "fenced.ttl_ms": call.ttlMs }),
    ...fenceAttributes(call.fences),
  };
}

/**
 * Runs one lock operation as a span (`fenced.lock.acquire`, …: the active span while it runs, so each
 * node's answer lands on it as an event, see nodeEvents) and publishes its end on its channel.
 * `describe` reads the result only when a span records or someone subscribes: a holder id is a hash.
 */
export function observed<T>(call: LockCall, run: () => Promise<T>, describe: (result: T) => LockResult): Promise<T> {
  const ch = channels[call.operation];
  return tracer.startActiveSpan(`fenced.lock.${call.operation}`, { attributes: callAttributes(call) }, async (span) => {
    const started = performance.now();
    try {
      const result = await run();
      const recording = span.isRecording();
      if (recording || ch.hasSubscribers) {
        const told = describe(result);
        if (recording) span.setAttributes({ ...fenceAttributes(told.fences), "fenced.outcome": "ok" });
        if (ch.hasSubscribers) ch.publish({ ...call, ...told, outcome: "ok", durationMs: performance.now() - started });
      }
      return result;
    } catch (err) {
      const outcome = outcomeOf(err);
      failed(span, outcome, err);
      if (ch.hasSubscribers) ch.publish({ ...call, outcome, error: err, durationMs: performance.now() - started });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** A failed operation's span: its outcome, and ERROR status with the error's message (no stack: refusals are expected). */
function failed(span: Span, outcome: LockOutcome, err: unknown): void {
  if (!span.isRecording()) return;
  span.setAttribute("fenced.outcome", outcome);
  span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
}

/** One node's answer in a fan-out, as the quorum code reports it (quorum.ts, Reply). */
type NodeReply = { readonly ok: true } | { readonly ok: false; readonly failure: NodeFailure };

/**
 * One event per node on the active span (the operation's): `fenced.lock.node` with the node's index,
 * its answer (`ok` or the NodeFailure reason) and the failure's code. Nothing when no span records.
 */
export function nodeEvents(phase: string, replies: readonly NodeReply[], nodes?: readonly number[]): void {
  const span = trace.getActiveSpan();
  if (span === undefined || !span.isRecording()) return;
  replies.forEach((reply, i) => {
    const failure = reply.ok ? undefined : reply.failure;
    span.addEvent("fenced.lock.node", {
      "fenced.lock.phase": phase,
      "fenced.lock.node": nodes?.[i] ?? i,
      "fenced.lock.reply": failure === undefined ? "ok" : failure.reason,
      ...(failure !== undefined && "code" in failure && failure.code !== undefined ? { "fenced.lock.code": failure.code } : {}),
    });
  });
}

/** Publishes a lease known lost (not by its own release) on fenced:lock:lost. */
export function publishLost(error: LeaseLostError): void {
  if (!channels.lost.hasSubscribers || error.kind === "released") return;
  channels.lost.publish({
    resources: error.fences.map((f) => f.resource),
    fences: error.fences,
    kind: error.kind,
    error,
  } satisfies LockLostMessage);
}
