import { DeleteObjectCommand, DeleteObjectsCommand, type S3Client } from "@aws-sdk/client-s3";
import { requestSignal } from "../deadline.js";
import { statusOf } from "../aws/answers.js";

/** How long a queued deletion waits for others to share its request. */
const DELAY_MS = 100;
/** Deletions per DeleteObjects request (S3 accepts up to 1,000). */
const BATCH = 100;

/**
 * Whether a failed DeleteObjects says the backend does not do DeleteObjects at all (400, 405, …), not
 * that it failed this once (no answer, 5xx, 429): then single DeleteObject requests are sent instead.
 */
export function refusesDeleteObjects(err: unknown): boolean {
  const status = statusOf(err);
  return status !== undefined && status < 500 && status !== 429;
}

interface Queued {
  readonly key: string;
  readonly done: () => void;
}

/**
 * The background deletions of data objects that no manifest names and none can come to name
 * (PROTOCOL.md, "Data objects and cleanup"), sent together: one DeleteObjects for up to BATCH
 * objects, DELAY_MS after the first was queued, or at once while flush() waits. Deferring such a
 * deletion is always safe: an object that no manifest can come to name never can again. Best
 * effort, like every cleanup: an object whose deletion fails is left to the sweeper.
 */
export class Deletions {
  private queue: Queued[] = [];
  private timer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;
  /** flush() calls waiting: while any is, deletions go out without delay. */
  private urgent = 0;
  /** The backend refused DeleteObjects itself (not one of its keys): one DeleteObject per object from then on. */
  private batchRefused = false;

  constructor(
    private readonly client: S3Client,
    private readonly bucket: string,
    /** Each deletion request gets an answer within this long or is given up (left to the sweeper): flush() never hangs. */
    private readonly timeoutMs: number,
  ) {}

  /** Queues a deletion; resolves once it was sent and answered (deleted, or failed). */
  delete(key: string): Promise<void> {
    return new Promise((done) => {
      this.queue.push({ key, done });
      if (this.urgent > 0 || this.queue.length >= BATCH) this.sendSoon();
      else this.timer ??= setTimeout(() => this.send(), DELAY_MS).unref(); // never keeps the process alive
    });
  }

  /** Runs `work` (a flush) with every queued deletion sent at once, and those queued meanwhile too. */
  async urgently<T>(work: () => Promise<T>): Promise<T> {
    this.urgent++;
    this.sendSoon();
    try {
      return await work();
    } finally {
      this.urgent--;
    }
  }

  /** Sends once the current turn of the event loop is over: deletions queued in it share the request. */
  private sendSoon(): void {
    this.immediate ??= setImmediate(() => this.send());
  }

  private send(): void {
    clearTimeout(this.timer);
    clearImmediate(this.immediate);
    this.timer = undefined;
    this.immediate = undefined;
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, BATCH);
      void this.deleteAll(batch.map((q) => q.key)).finally(() => {
        for (const q of batch) q.done();
      });
    }
  }

  private async deleteAll(keys: readonly string[]): Promise<void> {
    if (keys.length > 1 && !this.batchRefused) {
      try {
        // Quiet: the answer lists only the keys that failed; they stay for the sweeper.
        await this.client.send(
          new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: keys.map((Key) => ({ Key })), Quiet: true } }),
          { abortSignal: requestSignal(this.timeoutMs) },
        );
        return;
      } catch (err) {
        // A backend without DeleteObjects gets single deletions from now on; after a transient
        // failure only this batch goes one by one.
        if (refusesDeleteObjects(err)) this.batchRefused = true;
      }
    }
    await Promise.all(
      keys.map((Key) =>
        this.client
          .send(new DeleteObjectCommand({ Bucket: this.bucket, Key }), { abortSignal: requestSignal(this.timeoutMs) })
          .catch(() => undefined),
      ),
    );
  }
}
