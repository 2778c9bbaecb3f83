import type { StaleTokenError } from "../errors.js";
import type { CheckedFence } from "../fence.js";
import { refusal, type Intent } from "./intent.js";
import type { FenceSnapshot, Snapshot } from "./io.js";
import { fenceRefusal, needsRaise } from "./manifest.js";

/**
 * What a write does next, as a pure function of what it knows: its intent, the resource fence
 * objects as last read and the key's manifest as last read (or remembered). The driver (write.ts)
 * does the I/O a decision asks for and asks again with the answers, until it is told to put or to
 * refuse; a manifest PUT goes on the wire only on a decision to put (write.ts, `putManifest`). Nothing
 * here sends, awaits or reads a clock. PROTOCOL.md, "S3", "The write", steps 3 to 7.
 */

/** The resource fence objects as the write knows them. */
export type FenceView =
  /** checkResourceFence: false. The manifest's own entries are the only check. */
  | { readonly checked: false }
  | {
      readonly checked: true;
      /** As last read or raised, one per fence of the intent (null: absent); undefined: not read yet. */
      readonly snaps: readonly (FenceSnapshot | null)[] | undefined;
      /**
       * Read after everything the write awaited since (run.ts, `fencesCurrent`): a manifest PUT may
       * go out on them. The window a newer holder can slip through is then the one from that read to
       * the PUT landing, and no wider.
       */
      readonly current: boolean;
    };

/** The key's manifest as the write knows it. */
export interface ManifestView {
  readonly snap: Snapshot | null;
  /** Read during this write: only such a manifest may refuse it (a remembered or assumed one is read first). */
  readonly read: boolean;
}

export type Decision =
  /** The write is refused; nothing of it was sent after this. */
  | { readonly kind: "refuse"; readonly error: Error }
  /** Read the manifest (and the fence objects, when `fences`) before anything else. */
  | { readonly kind: "read"; readonly fences: boolean }
  /** Raise the fence objects to this write's tokens (each is below one, or absent). */
  | { readonly kind: "raise" }
  /** Read the fence objects, then decide again: the PUT follows that read's answer (write.ts, `putManifest`). */
  | { readonly kind: "read-fences" }
  /** Send the manifest PUT, conditional on `target` (null: If-None-Match). */
  | { readonly kind: "put"; readonly target: Snapshot | null };

type DecisionInput = Pick<Intent, "key" | "owner" | "fences" | "ifVersion">;

/**
 * The order is the order of the answers a caller sees: a stale token before what the manifest says
 * (owner, entries, version), and a raise only after the manifest, read in this write, admitted the
 * write (a write refused for its key's owner raises nothing).
 */
export function decide(intent: DecisionInput, fences: FenceView, manifest: ManifestView): Decision {
  const known = fences.checked ? fences.snaps : undefined;
  const stale = known === undefined ? undefined : staleFence(intent.fences, known);
  if (stale !== undefined) return { kind: "refuse", error: stale };
  const refused = refusal(intent, manifest.snap);
  if (refused !== undefined) {
    return manifest.read ? { kind: "refuse", error: refused } : { kind: "read", fences: fences.checked && known === undefined };
  }
  if (!fences.checked) return { kind: "put", target: manifest.snap };
  if (known === undefined) return { kind: "read-fences" };
  if (intent.fences.some((f, i) => needsRaise(f, known[i] ?? null)))
    return manifest.read ? { kind: "raise" } : { kind: "read", fences: false };
  return fences.current ? { kind: "put", target: manifest.snap } : { kind: "read-fences" };
}

/** The first fence, in the intent's order, that its fence object refuses. */
function staleFence(fences: readonly CheckedFence[], snaps: readonly (FenceSnapshot | null)[]): StaleTokenError | undefined {
  return fences.map((f, i) => fenceRefusal(f, snaps[i] ?? null)).find((e) => e !== undefined);
}
