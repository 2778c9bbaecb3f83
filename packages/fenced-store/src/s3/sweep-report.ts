/** What sweep() takes, and what it reports (sweep.ts does the sweeping; PROTOCOL.md, "Data objects and cleanup"). */

export interface S3SweepCount {
  readonly objects: number;
  readonly bytes: number;
}

export interface S3SweepReport {
  readonly dryRun: boolean;
  readonly minAgeMs: number;
  /** Every object listed under `<prefix>data/` and `<prefix>probe/`. */
  readonly scanned: S3SweepCount;
  /** Deleted (with dryRun: those that would have been). */
  readonly deleted: S3SweepCount;
  /** Scanned and not deleted; why, in keptBecause. */
  readonly kept: S3SweepCount;
  readonly keptBecause: {
    /**
     * The key's manifest names it, or can still come to: its attempt's target is current, or it is
     * a create's object while the key has no manifest.
     */
    readonly named: S3SweepCount;
    /** Younger than minAgeMs (a probe: than minAgeMs, timeoutMs and one hour). */
    readonly young: S3SweepCount;
    /**
     * A name without an attempt target (format /1), one the store does not write, or one whose key
     * has no manifest although its target is a writeId (something else wrote under the prefix, such
     * as another store, an unsupported configuration; or a manifest was deleted by hand).
     */
    readonly unrecognised: S3SweepCount;
  };
  /**
   * Incomplete multipart uploads under `<prefix>data/`: listed; aborted (with dryRun: would have
   * been; one found gone already, completed or aborted by another, is not counted); and kept, and
   * why: `named` (its attempt's target is current, or it is a create's on a key with no manifest:
   * its writer may still be sending it, however old it is), `young`, `unrecognised` (a name without
   * an attempt target, or no manifest although its target is a writeId).
   */
  readonly uploads: { readonly scanned: number; readonly aborted: number; readonly kept: S3SweepUploadsKept };
}

interface S3SweepUploadsKept {
  readonly named: number;
  readonly young: number;
  readonly unrecognised: number;
}

export interface S3SweepProgress extends S3SweepReport {
  /** What the page just dealt with was a listing of: data objects, verify()'s probes, multipart uploads. */
  readonly phase: "data" | "probes" | "uploads";
  /** Listing pages dealt with so far, all phases together. */
  readonly pages: number;
}

export interface S3SweepOptions {
  /**
   * Objects younger than this (by their LastModified) are kept, and so are multipart uploads
   * initiated after now − minAgeMs. Default 86,400,000 (one day); 0 to 315,360,000,000. A courtesy
   * to writes in flight, not what makes the sweep safe: with 0 it still deletes and aborts only what
   * no manifest names or can come to name.
   */
  readonly minAgeMs?: number | undefined;
  /** List, read and judge, but delete and abort nothing; the report counts what would have gone. */
  readonly dryRun?: boolean | undefined;
  /** Aborts the sweep: the requests in flight are aborted and sweep() throws the signal's reason. */
  readonly signal?: AbortSignal | undefined;
  /** Manifest reads, deletion requests and aborts in flight at once; default 8, 1 to 64. */
  readonly concurrency?: number | undefined;
  /** Objects (or uploads) per listing request; default 1,000 (the most S3 returns), 1 to 1,000. */
  readonly pageSize?: number | undefined;
  /** Called after each listed page is dealt with, with the totals so far. What it throws ends the sweep, as it is. */
  readonly onProgress?: ((progress: S3SweepProgress) => void) | undefined;
}

/** Objects and bytes, counted as they are dealt with. */
export class Count {
  objects = 0;
  bytes = 0;
  add(size: number): void {
    this.objects++;
    this.bytes += size;
  }
  get value(): S3SweepCount {
    return { objects: this.objects, bytes: this.bytes };
  }
}
