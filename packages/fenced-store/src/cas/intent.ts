import type { Readable } from "node:stream";
import { ResourceMismatchError, StaleTokenError, VersionMismatchError } from "../errors.js";
import { admits, type CheckedFence } from "../fence.js";
import type { Deadline } from "../deadline.js";
import type { Snapshot } from "./io.js";
import { entryFor, nextHeader, transferHeader, type ManifestHeader } from "./manifest.js";

/** What a write asks of the key's manifest, and what the manifest it writes holds. */

export type Content =
  | { readonly kind: "inline"; readonly bytes: Buffer }
  | { readonly kind: "object"; readonly payload: Buffer | Readable; readonly length: number | undefined }
  | { readonly kind: "tombstone" }
  /** transfer: the body of the manifest replaced, carried over unchanged. */
  | { readonly kind: "carry" };

/** One fenced write of a key's manifest: put, delete (tombstone), update's write, or transfer. */
export interface Intent {
  readonly key: string;
  /** The resource the key must belong to, if it exists. */
  readonly owner: string;
  /** Each must be admitted by its resource's entry in the manifest and by its resource's fence object; both are raised to it. */
  readonly fences: readonly CheckedFence[];
  /** The fence whose resource owns the key after the write, and whose token and holder the new version records. */
  readonly writer: CheckedFence;
  /** undefined: any version; null: the key must be absent; "exists": any version, but the key must exist. */
  readonly ifVersion: string | null | undefined | { readonly exists: true };
  readonly content: Content;
  readonly contentType: string | undefined;
  /** The call it is part of, as errors name it (update's write is "update"). */
  readonly operation: "put" | "delete" | "update" | "transfer";
  /** The call's deadline (timeoutMs), which also carries the caller's signal. */
  readonly deadline: Deadline;
  /** The deadline's signal: every request of the write carries it. */
  readonly signal: AbortSignal;
  /** Whether the write ends the deadline when it is over (false: the caller does, as update(), whose rounds share it). */
  readonly endDeadline: boolean;
}

/**
 * The refusal of a transfer (ifVersion "exists") whose key has no manifest: the key was never
 * written. Not an error for the caller: transfer() resolves undefined.
 */
export class NeverWrittenError extends Error {
  constructor(readonly key: string) {
    super(`key ${JSON.stringify(key)} was never written`);
    this.name = "NeverWrittenError";
  }
}

/** A manifest known to be current (or absent), with its inline body when it was read just now. */
export interface ManifestState {
  readonly snap: Snapshot | null;
  readonly inline: Buffer | undefined;
  /** Read during this write (not remembered from an earlier one, nor assumed absent). */
  readonly read: boolean;
}

/**
 * Why the manifest refuses this write, if it does: the key's owner first, then each fence against
 * its resource's entry, then the caller's version.
 */
export function refusal(intent: Pick<Intent, "key" | "owner" | "fences" | "ifVersion">, snap: Snapshot | null): Error | undefined {
  const header = snap?.header;
  if (header !== undefined && header.owner !== intent.owner) return new ResourceMismatchError(intent.key, intent.owner, header.owner);
  for (const fence of intent.fences) {
    const highest = entryFor(header, fence.resource);
    if (highest !== undefined && !admits(highest, fence))
      return new StaleTokenError(fence.resource, fence.token, highest.token, highest.holder);
  }
  const { ifVersion } = intent;
  if (ifVersion === undefined) return undefined;
  if (ifVersion !== null && typeof ifVersion === "object") return snap === null ? new NeverWrittenError(intent.key) : undefined;
  const actual = header?.writeId;
  if (ifVersion === null ? snap === null : actual === ifVersion) return undefined;
  const visible = header !== undefined && header.body.kind !== "tombstone" ? actual : undefined;
  return new VersionMismatchError(intent.key, ifVersion ?? "(absent)", visible);
}

/** The manifest an attempt writes over `state` (a transfer carries the body of the one it replaces). */
export function build(
  intent: Intent,
  state: ManifestState,
  writeId: string,
  dataKey: string | undefined,
): { header: ManifestHeader; inline: Buffer | undefined } {
  const { content, key } = intent;
  const prev = state.snap?.header;
  if (content.kind === "carry") {
    if (prev === undefined) throw new Error("a transfer is built on the manifest it replaces"); // refusal() requires it
    const [from] = intent.fences;
    if (from === undefined) throw new Error("a transfer presents its from fence");
    return { header: transferHeader(prev, from, intent.writer, writeId), inline: state.inline };
  }
  const body: ManifestHeader["body"] =
    content.kind === "inline"
      ? { kind: "inline", size: content.bytes.length }
      : content.kind === "object" && dataKey !== undefined
        ? { kind: "object", dataKey }
        : { kind: "tombstone" };
  const header = nextHeader(prev, key, intent.writer, writeId, body, content.kind === "tombstone" ? undefined : intent.contentType);
  return { header, inline: content.kind === "inline" ? content.bytes : undefined };
}
