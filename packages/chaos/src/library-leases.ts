import { Redlock } from "@fenced/lock";
import { Redis } from "ioredis";
import { NoLeaseError, RETRY_DELAY_MS, RETRY_JITTER_MS, whyNoLease, type LeaseSource } from "./lease-source.js";

/**
 * Redlock in the worker's own process, over its own connections (through its delay proxies) to the
 * nodes. A module of its own: a worker that takes its leases from a gateway never loads the lock.
 */
export function libraryLeases(redisUrls: readonly string[], nodeTimeoutMs: number): LeaseSource {
  const redises = redisUrls.map((url) => {
    const client = new Redis(url, {
      // Reconnect fast after a node restarts; the lock's nodeTimeoutMs bounds each command anyway.
      retryStrategy: (times) => Math.min(20 * times, 200),
      maxRetriesPerRequest: 5,
    });
    client.on("error", () => undefined);
    return client;
  });
  const redlock = new Redlock(redises, {
    retryCount: Infinity,
    retryDelayMs: RETRY_DELAY_MS,
    retryJitterMs: RETRY_JITTER_MS,
    nodeTimeoutMs,
  });
  return {
    async acquire(resource, ttlMs, signal) {
      try {
        const lease = await redlock.acquire(resource, ttlMs, { signal });
        // A copy, as the gateway's leases are: the Lease itself knows when it ended, and a store
        // refuses it before any I/O; the run is here to see what the storage does with a stale writer.
        const fence = { resource: lease.resource, token: lease.token, holder: lease.holder };
        return { fence, credential: undefined, registered: false, release: () => lease.release() };
      } catch (err) {
        throw new NoLeaseError(signal.aborted ? whyNoLease(signal) : err instanceof Error ? err.message : String(err), {
          cause: err,
        });
      }
    },
    async acquireSet(resources, ttlMs, signal) {
      try {
        const lease = await redlock.acquire(resources, ttlMs, { signal });
        // Copies, as above: one fence per resource, in the order asked for.
        const fences = lease.fences.map((f) => ({ resource: f.resource, token: f.token, holder: f.holder, credential: undefined }));
        return { fences, release: () => lease.release() };
      } catch (err) {
        throw new NoLeaseError(signal.aborted ? whyNoLease(signal) : err instanceof Error ? err.message : String(err), {
          cause: err,
        });
      }
    },
    close: () => redises.forEach((r) => r.disconnect()),
  };
}
