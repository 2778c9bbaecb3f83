import { setTimeout as sleep } from "node:timers/promises";
import type { S3Client } from "@aws-sdk/client-s3";
import { Lru } from "../lru.js";
import { ContentionError, StaleTokenError } from "../errors.js";
import type { CheckedFence } from "../fence.js";
import type { Condition } from "../conditional/port.js";
import { ConditionalObjects } from "./conditional.js";
import { requestSignal } from "../deadline.js";
import { Deletions } from "./deletions.js";
import { refusedOwnEtag } from "./failures.js";
import { fenceKey, manifestKey } from "./layout.js";
import { decodeFence, decodeManifest, encodeFence, fenceRefusal, needsRaise, type Highest, type ManifestHeader } from "./manifest.js";
import type { ResolvedOptions } from "./options.js";

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
 * What one FencedS3 shares between its calls: the conditional-write primitive, what it last saw of
 * each key's manifest and each resource's fence (hints that save requests, never trusted for a
 * decision), and the background deletions flush() waits for.
 */
export class StoreIo {
  readonly objects: ConditionalObjects;
  /** The background deletions of replaced bodies, batched; flush() sends them at once. */
  readonly deletions: Deletions;
  /**
   * Last manifest seen per key: a write whose CAS on it succeeds needs no read first. After a lost
   * race on a key, its next few writes read first anyway: a writer swapping on a remembered manifest
   * takes one round trip where a loser needs two (read, swap), so under steady contention the same
   * writers would keep winning and a loser could starve.
   */
  private readonly cache = new Lru<string, { snap: Snapshot | null; readFirst: number }>(CACHE_ENTRIES);
  /**
   * Last fence object seen per resource: predicts whether a write will have to raise it, and lets
   * the next read of it be conditional (If-None-Match on its ETag). Never trusted without that
   * read: a 304 says the object still has exactly these bytes, since fence ETags never repeat.
   */
  private readonly fences = new Lru<string, FenceSnapshot>(CACHE_ENTRIES);
  private readonly pending = new Set<Promise<void>>();

  constructor(
    readonly client: S3Client,
    readonly options: ResolvedOptions,
  ) {
    this.objects = new ConditionalObjects(client, options.bucket, options.timeoutMs);
    this.deletions = new Deletions(client, options.bucket, options.timeoutMs);
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
    const { header, inline } = decodeManifest(key, stored.body);
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
    const snap = { etag: stored.etag, highest: decodeFence(resource, stored.body) };
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
        throw refusedOwnEtag(target);
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
    const task: Promise<void> = work()
      .catch(() => undefined)
      .finally(() => this.pending.delete(task));
    this.pending.add(task);
  }

  async flush(): Promise<void> {
    await this.deletions.urgently(async () => {
      while (this.pending.size > 0) await Promise.all([...this.pending]);
    });
  }
}
