import type { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { Lru } from "../lru.js";
import { ContentionError, StaleTokenError } from "../errors.js";
import type { CheckedFence } from "../fence.js";
import type { Condition, ConditionalPort } from "../conditional/port.js";
import { requestSignal, type Deadline } from "../deadline.js";
import type { BackendFailures } from "./failures.js";
import { fenceKey, manifestKey } from "./layout.js";
import { decodeFence, decodeManifest, encodeFence, fenceRefusal, needsRaise, type Highest, type ManifestHeader } from "./manifest.js";

/** What the algorithm takes of a store's options. */
export interface CasOptions {
  /** Every record the store writes is named under it (layout.ts). */
  readonly prefix: string;
  /** The one deadline of a call, and the bound of a request no call waits for. */
  readonly timeoutMs: number;
  /** Conflicting writes of one record (and reads of a key that keeps changing) before a call gives up (ContentionError). */
  readonly maxAttempts: number;
  /** Whether writes read, check and raise the resource fence objects. */
  readonly checkResourceFence: boolean;
}

/**
 * The data objects of one write (S3: s3/bodies.ts, AttemptBodies): one per manifest attempt, named
 * for the manifest it is sent against; write.ts drives them, run.ts stamps fence reads with the one
 * in place.
 */
export interface Bodies {
  /** Starts the upload for an attempt against `target` while the write's checks run. */
  begin(target: string | null): void;
  /** The data object in place for the next attempt against `target`, if one is (no I/O). */
  inPlace(target: string | null): string | undefined;
  /** A data object for the next attempt against `target`, made or waited for. */
  prepare(target: string | null): Promise<string>;
  /** `attempt`, naming this object, is being sent. */
  sent(key: string, attempt: { readonly ambiguous: boolean }): void;
  /** Deletes what no manifest can come to name, once the write is over (current: the key's manifest, undefined if unknown). */
  cleanup(current: ManifestHeader | null | undefined): Promise<void>;
}

/** A manifest as last read or written, identified by its bare ETag. */
export interface Snapshot {
  readonly etag: string;
  readonly header: ManifestHeader;
}

/** A manifest read just now, with its inline body (undefined unless the body is inline). */
export interface Found {
  readonly snap: Snapshot;
  readonly inline: Buffer | undefined;
}

/** A resource's fence object as read or written: the highest token registered and its holder. */
export interface FenceSnapshot {
  readonly etag: string;
  readonly highest: Highest;
}

const CACHE_ENTRIES = 4096;
/** Writes of a key that read its manifest first after this store lost a race on it twice in one write. */
const CONTENDED_READ_FIRST = 16;

export function condition(snap: { etag: string } | null): Condition {
  return snap === null ? { ifNoneMatch: true } : { ifMatch: snap.etag };
}

/**
 * The pause after a throttled conditional PUT before its next try (full jitter, as the SDK's own
 * throttling backoff: 500 ms doubling per throttled answer, at most 20 s). The next try is sent only
 * after a fence read that follows this pause.
 */
export function throttledPause(throttled: number, signal: AbortSignal | undefined): Promise<void> {
  const ms = Math.random() * Math.min(500 * 2 ** (throttled - 1), 20_000);
  return sleep(ms, undefined, signal === undefined ? undefined : { signal });
}

/**
 * What one store of the algorithm shares between its calls: the conditional port, what it last saw
 * of each key's manifest and each resource's fence (hints that save requests, never trusted for a
 * decision), and the background work flush() waits for. A store with data objects (S3: s3/io.ts)
 * extends it with their deletion.
 */
export class StoreIo {
  /**
   * Last manifest seen per key: a write whose CAS on it succeeds needs no read first. After a lost
   * race on a key, its next few writes read first anyway: a writer swapping on a remembered manifest
   * takes one round trip where a loser needs two (read, swap), so under steady contention the same
   * writers would keep winning and a loser could starve.
   */
  private readonly cache = new Lru<string, { snap: Snapshot | null; readFirst: number }>(CACHE_ENTRIES);
  /**
   * Last fence object seen per resource: predicts whether a write will have to raise it, and lets
   * the next read of it be a revalidation on its ETag (S3: If-None-Match; the port's readIfChanged).
   * Never trusted without that read: "unchanged" says the object still has exactly these bytes,
   * since fence ETags never repeat.
   */
  private readonly fences = new Lru<string, FenceSnapshot>(CACHE_ENTRIES);
  /**
   * Background tasks still running, and what flush() has left waiting for none to be. A count, not a
   * Set of the tasks: a Set that takes and drops an entry a write would, once a mark-compact has
   * promoted its hash table, keep every task (and what its closures hold) alive into old space, through
   * the chain V8 links from each table it replaces to the next.
   */
  private running = 0;
  private readonly idle: (() => void)[] = [];

  constructor(
    readonly objects: ConditionalPort,
    readonly options: CasOptions,
    readonly failures: BackendFailures,
  ) {}

  /**
   * The data objects of a write whose body does not go inline (content "object"). A store without
   * data objects (capabilities.dataObjects false) never builds such a write: its bodies are inline.
   */
  attemptBodies(
    key: string,
    _payload: Buffer | Readable,
    _length: number | undefined,
    _contentType: string | undefined,
    _deadline: Deadline,
  ): Bodies {
    throw new Error(`this store has no data objects, yet a write of ${JSON.stringify(key)} asked for one`);
  }

  /**
   * Deletes a data object no manifest names or can come to name any more (write.ts, after a write
   * replaced the manifest naming it). A store without data objects never has one to delete.
   */
  retireData(dataKey: string): Promise<void> {
    return Promise.reject(new Error(`this store has no data objects, yet a manifest named ${dataKey}`));
  }

  /** The signal of a request no call waits for (cleanup after a call ended): bounded on its own. */
  cleanupSignal(): AbortSignal {
    return requestSignal(this.options.timeoutMs);
  }

  /** What this store remembers of a key; a "read first" turn is used up by asking. */
  recall(key: string): { readonly snap: Snapshot | null; readonly readFirst: boolean } | undefined {
    const entry = this.cache.get(key);
    if (entry === undefined) return undefined;
    const readFirst = entry.readFirst > 0;
    if (readFirst) entry.readFirst--;
    return { snap: entry.snap, readFirst };
  }

  remember(key: string, snap: Snapshot | null): void {
    const readFirst = this.cache.get(key)?.readFirst ?? 0;
    this.cache.set(key, { snap, readFirst });
  }

  contended(key: string): void {
    const entry = this.cache.get(key);
    if (entry !== undefined) entry.readFirst = CONTENDED_READ_FIRST;
  }

  /** Whether this store expects the fence object to need raising for this fence (a guess: it only decides what to read early). */
  expectsRaise(fence: CheckedFence): boolean {
    const seen = this.fences.get(fence.resource);
    return seen === undefined || fence.token > seen.highest.token;
  }

  private noteFence(resource: string, snap: FenceSnapshot): void {
    this.fences.set(resource, snap);
  }

  async readManifest(key: string, signal: AbortSignal | undefined): Promise<Found | null> {
    const stored = await this.objects.read(manifestKey(this.options.prefix, key), signal);
    if (stored === undefined) {
      this.remember(key, null);
      return null;
    }
    const { header, inline } = decodeManifest(key, stored.body, this.failures.backend);
    const snap = { etag: stored.etag, header };
    this.remember(key, snap);
    return { snap, inline };
  }

  /** The resource's fence object as it is now (null: absent), read conditionally on the one last seen. */
  async readFence(resource: string, signal: AbortSignal | undefined): Promise<FenceSnapshot | null> {
    const key = fenceKey(this.options.prefix, resource);
    const seen = this.fences.get(resource);
    const found =
      seen === undefined
        ? { unchanged: false as const, object: await this.objects.read(key, signal) }
        : await this.objects.readIfChanged(key, seen.etag, signal);
    if (found.unchanged && seen !== undefined) {
      this.noteFence(resource, seen);
      return seen;
    }
    const stored = found.unchanged ? undefined : found.object;
    if (stored === undefined) {
      this.fences.delete(resource);
      return null;
    }
    const snap = { etag: stored.etag, highest: decodeFence(resource, stored.body, this.failures.backend) };
    this.noteFence(resource, snap);
    return snap;
  }

  /**
   * Raises the resource's fence object to this fence (CAS loop) unless it admits it already;
   * StaleTokenError if it refuses it. Returns the fence object as it now is. known: undefined = not
   * read yet, null = known absent. `sent.open` tells, while it runs and if it fails, whether a raise
   * it sent may have landed without its answer being known (register() then reports the failure as
   * unknown) — except a refusal by the fence object, which is final either way.
   */
  async raiseFence(
    fence: CheckedFence,
    known: FenceSnapshot | null | undefined,
    signal: AbortSignal | undefined,
    sent: { open: boolean } = { open: false },
  ): Promise<FenceSnapshot> {
    const target = fenceKey(this.options.prefix, fence.resource);
    let snap = known === undefined ? await this.readFence(fence.resource, signal) : known;
    let throttled = 0;
    for (let attempt = 1; ; attempt++) {
      const refused = fenceRefusal(fence, snap);
      if (refused !== undefined) {
        // Final, even with a raise of ours unanswered: whether or not it landed, the fence object now
        // holds a higher token (or this token from another holder), so it refuses this fence on every
        // key for good — a raise that landed and was overtaken left nothing a reader can tell apart.
        // A raise writes no data (PROTOCOL.md): the refusal is all register() has to report.
        sent.open = false;
        throw refused;
      }
      if (snap !== null && !needsRaise(fence, snap)) return snap; // already at this token, from this holder
      // From here until an answer says otherwise, this raise may land. An earlier one that got no
      // answer stays open: it may have landed since, and been overtaken by a higher token.
      const earlier = sent.open;
      sent.open = true;
      const outcome = await this.objects.write(target, encodeFence(fence), condition(snap), signal);
      if (!outcome.ok && outcome.failure !== "ambiguous") sent.open = earlier;
      if (outcome.ok) {
        const raised = { etag: outcome.etag, highest: { token: fence.token, holder: fence.holder } };
        this.noteFence(fence.resource, raised);
        return raised;
      }
      signal?.throwIfAborted();
      if (outcome.failure === "fatal") throw outcome.error;
      if (outcome.failure === "throttled") await throttledPause(++throttled, signal);
      // Whatever went wrong, the fence object says what holds now (a raise of ours that landed admits us).
      const current = await this.readFence(fence.resource, signal);
      if (outcome.failure === "precondition" && snap !== null && current?.etag === snap.etag && !this.objects.noteRefusedOwnEtag()) {
        throw this.failures.refusedOwnEtag(target);
      }
      if (attempt >= this.options.maxAttempts) {
        throw new ContentionError(
          target,
          attempt,
          `register ${JSON.stringify(fence.resource)} gave up after ${attempt} conflicting writes of its fence object`,
        );
      }
      snap = current;
    }
  }

  /**
   * register(): raiseFence for each fence, all at once, each with its own record of what it sent
   * (`sent[i]`, open while its raise may have landed unanswered; an answered raise is known, so its
   * record is closed). Waits for every raise to end, then throws the first StaleTokenError in the
   * order given, else the first failure. The others are raised or not, each by itself: a fence
   * object raised alone only refuses its resource's older holders.
   */
  async raiseFences(fences: readonly CheckedFence[], signal: AbortSignal | undefined, sent: readonly { open: boolean }[]): Promise<void> {
    const settled = await Promise.allSettled(
      fences.map(async (fence, i) => {
        const mine = sent[i] as { open: boolean };
        await this.raiseFence(fence, undefined, signal, mine);
        mine.open = false; // answered: raised
      }),
    );
    const failures = settled.flatMap((r) => (r.status === "rejected" ? [r.reason as unknown] : []));
    if (failures.length > 0) throw failures.find((e) => e instanceof StaleTokenError) ?? failures[0];
  }

  /** A best-effort deletion or cleanup that outlives its call; flush() waits for it. */
  background(work: () => Promise<void>): void {
    // Chained before it is counted: whatever throws here throws before the count could go up.
    const task = work().catch(() => undefined);
    this.running++;
    void task.finally(() => {
      if (--this.running > 0) return;
      for (const wake of this.idle.splice(0)) wake();
    });
  }

  /** Waits for every background task, those started meanwhile included: until none is running. */
  flush(): Promise<void> {
    return this.running === 0 ? Promise.resolve() : new Promise((resolve) => this.idle.push(resolve));
  }
}
