import { setTimeout as sleep } from "node:timers/promises";
import type { WriteLease } from "./counter-store.js";
import { LockBusyError, type GatewayClient, type GatewayLease } from "./gateway-client.js";

/**
 * Where a worker's leases come from: its own Redlock over the Redis nodes (`--via library`,
 * library-leases.ts), or a gateway's `POST /v1/leases` (`--via gateway`, here). Either way the worker
 * gets the lease's fence (with its public holder id), and through a gateway also the credential its
 * writes present.
 */

export interface WorkerLease extends WriteLease {
  readonly fence: { readonly resource: string; readonly token: bigint; readonly holder: string };
  /** Its fence is already registered with the store (the gateway did it before answering). */
  readonly registered: boolean;
  release(): Promise<void>;
}

/** A lease of several resources at once (`--pairs`): one fence per resource, in the order asked for, all with the lease's holder. */
export interface WorkerSetLease {
  readonly fences: readonly {
    readonly resource: string;
    readonly token: bigint;
    readonly holder: string;
    /** Through a gateway: the signed credential of the writes under this resource. */
    readonly credential: string | undefined;
  }[];
  release(): Promise<void>;
}

export interface LeaseSource {
  /** Throws NoLeaseError when no lease could be had, RegistrationRefusedError when a store refused to register it. */
  acquire(resource: string, ttlMs: number, signal: AbortSignal): Promise<WorkerLease>;
  /** All the resources in one lease, or none; throws NoLeaseError when it could not be had. Undefined where leases of sets are not offered. */
  readonly acquireSet?: (resources: readonly string[], ttlMs: number, signal: AbortSignal) => Promise<WorkerSetLease>;
  close(): void;
}

/** No lease: the lock could not be acquired (or the run stopped while trying). Nothing was written. */
export class NoLeaseError extends Error {
  override readonly name = "NoLeaseError";
}

/** Why an acquisition given up by its signal had no lease: the run stopped, or its deadline passed. */
export function whyNoLease(signal: AbortSignal): string {
  const reason: unknown = signal.reason;
  return reason instanceof Error && reason.name === "TimeoutError" ? "no lease within the deadline" : "run stopped while acquiring";
}

/** Between two attempts on a held lock: the same pace in the library workers' Redlock and in a gateway worker's retries. */
export const RETRY_DELAY_MS = 15;
export const RETRY_JITTER_MS = 30;

/**
 * Leases from the gateway, of one resource or of a set. A held lock (409 lock-held) or a lock without
 * a quorum (503) is retried at the library's pace, as the library workers' Redlock does, until the
 * lease is granted, or the deadline passes or the run stops (which also abandons an attempt in
 * flight); any other failure ends the operation (RegistrationRefusedError, or the client's errors).
 */
export function gatewayLeases(client: GatewayClient, register: boolean): LeaseSource {
  const granted = async (asked: string | readonly string[], ttlMs: number, signal: AbortSignal): Promise<GatewayLease> => {
    for (;;) {
      if (signal.aborted) throw new NoLeaseError(whyNoLease(signal));
      try {
        return await client.acquire(asked, ttlMs, register, signal);
      } catch (err) {
        // Given up at the deadline (or the run's stop) in the middle of an attempt: no lease.
        if (signal.aborted) throw new NoLeaseError(whyNoLease(signal), { cause: err });
        if (!(err instanceof LockBusyError)) throw err;
      }
      await sleep(RETRY_DELAY_MS + Math.random() * RETRY_JITTER_MS);
    }
  };
  return {
    async acquire(resource, ttlMs, signal) {
      const lease = await granted(resource, ttlMs, signal);
      return {
        fence: { resource: lease.resource, token: lease.token, holder: lease.holder },
        credential: lease.fence,
        registered: register,
        release: () => client.release(lease.leaseId),
      };
    },
    async acquireSet(resources, ttlMs, signal) {
      const lease = await granted(resources, ttlMs, signal);
      const fences = lease.fences.map((f) => ({ resource: f.resource, token: f.token, holder: lease.holder, credential: f.fence }));
      return { fences, release: () => client.release(lease.leaseId) };
    },
    close: () => client.close(),
  };
}
