import { Redis } from "ioredis";
import { Redlock, type Lease } from "@fenced/lock";
import type { Fence } from "@fenced/fence";
import { openStore, type BackendConfig, type DemoStore, type FileDoc, type ReadResult, type WriteOutcome } from "./backends.js";

/** What a client is told when it starts: plain data, so it can also go over IPC to a child process. */
export interface ClientSetup {
  readonly name: string;
  readonly redisUrls: readonly string[];
  readonly backend: BackendConfig;
  readonly fenced: boolean;
}

export interface LeaseInfo {
  /** Decimal: tokens are 64-bit and the JSON output must carry them exactly. */
  readonly token: string;
  readonly validityMs: number;
  /** The lease's random value on the lock nodes: shows which node holds whose key. */
  readonly value: string;
}

export interface ClientRead extends ReadResult {
  /** What the client believes right after reading: the check a careful client makes before it writes. */
  readonly leaseRemainingMs: number;
}

/** A lock client doing read-modify-write on the file; in this process or in a child process. */
export interface DemoClient {
  readonly name: string;
  /** The OS process the client runs in. */
  readonly pid: number;
  acquire(resource: string, ttlMs: number): Promise<LeaseInfo>;
  read(key: string): Promise<ClientRead>;
  /** Writes with the client's current lease as the fence (the unfenced store ignores it). */
  write(key: string, doc: FileDoc, ifVersion?: string): Promise<WriteOutcome>;
  register(): Promise<WriteOutcome>;
  leaseRemainingMs(): Promise<number>;
  release(): Promise<void>;
  close(): Promise<void>;
}

/**
 * The client itself. Each one has its own Redis connections and its own store (own S3 client or
 * pg pool), as separate machines would: nothing is shared with the other client but the servers.
 */
export class LocalClient implements DemoClient {
  readonly pid = process.pid;
  private lease: Lease | undefined;
  private readonly redis: Redis[];
  private readonly redlock: Redlock;
  private readonly store: DemoStore;

  constructor(readonly setup: ClientSetup) {
    this.redis = setup.redisUrls.map((url) => new Redis(url, { maxRetriesPerRequest: 1 }));
    // Few, quick retries: in the scenarios the lock is either free or held by someone who stays.
    this.redlock = new Redlock(this.redis, { retryCount: 5, retryDelayMs: 50, retryJitterMs: 25 });
    this.store = openStore(setup.backend, setup.fenced);
  }

  get name(): string {
    return this.setup.name;
  }

  async acquire(resource: string, ttlMs: number): Promise<LeaseInfo> {
    const lease = await this.redlock.acquire(resource, ttlMs);
    this.lease = lease;
    return { token: lease.token.toString(), validityMs: lease.remainingMs, value: lease.value };
  }

  async read(key: string): Promise<ClientRead> {
    const read = await this.store.read(key);
    return { ...read, leaseRemainingMs: this.lease?.remainingMs ?? 0 };
  }

  write(key: string, doc: FileDoc, ifVersion?: string): Promise<WriteOutcome> {
    // No validity check here on purpose: the client checked its lease before it was paused, which
    // is exactly what the article says cannot be enough. The fence is a copy, as a request built
    // before the pause carries it: the Lease itself knows when it ended, and a store refuses such a
    // fence before any I/O, which would hide the storage's own check that the demo is about.
    return this.store.write(key, doc, { fence: this.currentFence(), ifVersion });
  }

  register(): Promise<WriteOutcome> {
    return this.store.register(this.currentFence());
  }

  leaseRemainingMs(): Promise<number> {
    return Promise.resolve(this.lease?.remainingMs ?? 0);
  }

  async release(): Promise<void> {
    await this.lease?.release();
  }

  async close(): Promise<void> {
    await this.store.close();
    for (const r of this.redis) r.disconnect();
  }

  /** The current lease's fence, copied: it does not know whether the lease has ended since. */
  private currentFence(): Fence {
    if (this.lease === undefined) throw new Error(`${this.name} has no lease`);
    const { resource, token, holder } = this.lease;
    return { resource, token, holder };
  }
}
