import { HeadBucketCommand, type S3Client } from "@aws-sdk/client-s3";
import type { Pool } from "pg";

export interface BackendHealth {
  readonly ok: boolean;
  readonly error?: string;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message || err.name : String(err);
}

/** Runs a check with a deadline: a backend that hangs is as unhealthy as one that refuses. */
async function within(timeoutMs: number, check: (signal: AbortSignal) => Promise<unknown>): Promise<BackendHealth> {
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  try {
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        controller.abort();
        reject(new Error(`no answer within ${timeoutMs} ms`));
      }, timeoutMs);
    });
    await Promise.race([check(controller.signal), timeout]);
    return { ok: true };
  } catch (err) {
    return { ok: false, error: message(err) };
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A query on a pooled connection: proves the server answers and the pool can still connect. A
 * connection whose query outlives the deadline (a paused server) is destroyed, not kept: health
 * checks every few seconds through a long pause would otherwise hold the whole pool.
 */
export function postgresHealth(pool: Pool, timeoutMs: number): Promise<BackendHealth> {
  return within(timeoutMs, async (signal) => {
    const client = await pool.connect();
    let released = false;
    // A server that dies while the connection is held emits 'error' on it: unheard, that ends the process.
    const ignore = (): void => undefined;
    client.on("error", ignore);
    const release = (destroy: boolean): void => {
      if (released) return;
      released = true;
      // A destroyed connection may still report its end: the listener stays with it.
      if (!destroy) client.off("error", ignore);
      client.release(destroy);
    };
    if (signal.aborted) return release(true);
    signal.addEventListener("abort", () => release(true), { once: true });
    try {
      await client.query("SELECT 1");
    } finally {
      release(false);
    }
  });
}

/** HEAD on the bucket: proves the endpoint answers, the credentials work and the bucket exists. */
export function s3Health(client: S3Client, bucket: string, timeoutMs: number): Promise<BackendHealth> {
  return within(timeoutMs, (abortSignal) => client.send(new HeadBucketCommand({ Bucket: bucket }), { abortSignal }));
}
