import { z } from "zod";
import { MAX_TOKEN } from "@fenced/fence";
import { HOLDER_PATTERN, resourceProblem, TOKEN_PATTERN } from "@fenced/fence/internal";
import { OBJECT_VERSION } from "../versions.js";
import { CorruptStateError, StaleTokenError, type StoreBackend } from "../errors.js";
import { admits, type CheckedFence } from "../fence.js";
import { newId, targetOf } from "./layout.js";

/**
 * The two small objects that carry the ratchet: a key's manifest and a resource's fence object.
 * Every manifest and fence body carries a fresh random writeId, so no two writes ever produce the
 * same bytes and so the same ETag: an ETag that was replaced can never come back (no ABA).
 *
 * Format /2 records, with each highest token, the holder that presented it, and the key's owner.
 * Format /1 objects (no holders, no owner) are still read: every holder is null (a /1 token is
 * identified by itself alone, as a fence without a holder is), and the key's owner is the resource
 * of the write that produced the manifest. Writes always produce /2.
 */

const MANIFEST_FORMAT = "fenced-s3-manifest/2";
const MANIFEST_FORMAT_V1 = "fenced-s3-manifest/1";
const FENCE_FORMAT = "fenced-s3-fence/2";
const FENCE_FORMAT_V1 = "fenced-s3-fence/1";

/** The highest token accepted and the holder that presented it (null: a fence without a holder). */
export interface Highest {
  readonly token: bigint;
  readonly holder: string | null;
}

const TokenString = z
  .string()
  .regex(TOKEN_PATTERN)
  .refine((s) => BigInt(s) <= MAX_TOKEN);
const Id = z.string().regex(OBJECT_VERSION);
const Resource = z.string().refine((r) => resourceProblem(r) === undefined, "not a valid resource");
const Holder = z.string().regex(HOLDER_PATTERN).nullable();

const Body = z.discriminatedUnion("kind", [
  z.strictObject({ kind: z.literal("inline"), size: z.number().int().nonnegative() }),
  z.strictObject({ kind: z.literal("object"), dataKey: z.string() }),
  z.strictObject({ kind: z.literal("tombstone") }),
]);

const ManifestHeaderSchema = z.strictObject({
  format: z.literal(MANIFEST_FORMAT),
  key: z.string(),
  /** Unique per write attempt: the version callers see, and how an ambiguous outcome is resolved. */
  writeId: Id,
  /** 1 for the first write of the key, +1 per accepted write: the order in which writes were accepted. */
  seq: z.number().int().positive(),
  /** The resource the key belongs to: only a fence of this resource may write it (or transfer it away). */
  owner: Resource,
  /** The token and holder of the write that produced this version (its resource is the owner). */
  token: TokenString,
  holder: Holder,
  /**
   * The per-object ratchet: for each resource that has owned the key, the highest token accepted and
   * the holder that presented it, as [resource, token, holder] (a list, not an object: a resource may
   * be named "__proto__"). Entries of former owners are kept, so a key that comes back keeps its ratchet.
   */
  ratchet: z.array(z.tuple([Resource, TokenString, Holder])),
  /** Where the body is: after the header line (inline), in a data object, or nowhere (tombstone). */
  body: Body,
  contentType: z.string().optional(),
  writtenAt: z.string(),
});

const ManifestHeaderV1Schema = z.strictObject({
  format: z.literal(MANIFEST_FORMAT_V1),
  key: z.string(),
  writeId: Id,
  seq: z.number().int().positive(),
  resource: Resource,
  token: TokenString,
  tokens: z.array(z.tuple([Resource, TokenString])),
  body: Body,
  contentType: z.string().optional(),
  writtenAt: z.string(),
});

export type ManifestHeader = z.infer<typeof ManifestHeaderSchema>;

/** A /1 header read as /2: holders null, owner = the resource of the write that produced it. */
function upgrade(v1: z.infer<typeof ManifestHeaderV1Schema>): ManifestHeader {
  return {
    format: MANIFEST_FORMAT,
    key: v1.key,
    writeId: v1.writeId,
    seq: v1.seq,
    owner: v1.resource,
    token: v1.token,
    holder: null,
    ratchet: v1.tokens.map(([resource, token]) => [resource, token, null]),
    body: v1.body,
    ...(v1.contentType === undefined ? {} : { contentType: v1.contentType }),
    writtenAt: v1.writtenAt,
  };
}

const NEWLINE = 0x0a;

/** A manifest is one JSON line (the header), then the inline body bytes, if any. */
export function encodeManifest(header: ManifestHeader, inline?: Uint8Array): Buffer {
  const head = Buffer.from(`${JSON.stringify(header)}\n`, "utf8");
  return inline === undefined ? head : Buffer.concat([head, inline]);
}

/** A manifest the store cannot have written: it refuses to judge a fence against it. */
function corruptManifest(key: string, message: string, backend: StoreBackend): CorruptStateError {
  return new CorruptStateError(backend, "manifest", key, message);
}

/** Parses and checks a stored manifest; anything unexpected is an error, never a guess. */
/** `backend`: whose store read it, as a CorruptStateError names it. */
export function decodeManifest(
  key: string,
  bytes: Buffer,
  backend: StoreBackend = "s3",
): { header: ManifestHeader; inline: Buffer | undefined } {
  const newline = bytes.indexOf(NEWLINE);
  if (newline < 0) throw corruptManifest(key, `manifest of ${JSON.stringify(key)} has no header line`, backend);
  let parsed: unknown;
  try {
    parsed = JSON.parse(bytes.subarray(0, newline).toString("utf8"));
  } catch {
    throw corruptManifest(key, `manifest of ${JSON.stringify(key)} has a header that is not JSON`, backend);
  }
  const v1 = (parsed as { format?: unknown } | null)?.format === MANIFEST_FORMAT_V1;
  const result = v1 ? ManifestHeaderV1Schema.safeParse(parsed) : ManifestHeaderSchema.safeParse(parsed);
  if (!result.success)
    throw corruptManifest(
      key,
      `manifest of ${JSON.stringify(key)} is not a ${v1 ? MANIFEST_FORMAT_V1 : MANIFEST_FORMAT} header: ${result.error.message}`,
      backend,
    );
  const header = "tokens" in result.data ? upgrade(result.data) : result.data;
  if (header.key !== key)
    throw corruptManifest(key, `manifest at ${JSON.stringify(key)} names another key, ${JSON.stringify(header.key)}`, backend);
  const resources = header.ratchet.map(([r]) => r);
  if (new Set(resources).size !== resources.length)
    throw corruptManifest(key, `manifest of ${JSON.stringify(key)} has two ratchet entries for one resource`, backend);
  const own = entryFor(header, header.owner);
  if (own === undefined || own.token !== BigInt(header.token) || own.holder !== header.holder) {
    throw corruptManifest(key, `manifest of ${JSON.stringify(key)}: its owner's ratchet entry is not the write that produced it`, backend);
  }
  const rest = bytes.subarray(newline + 1);
  if (header.body.kind === "inline") {
    if (rest.length !== header.body.size)
      throw corruptManifest(
        key,
        `manifest of ${JSON.stringify(key)} is truncated: ${rest.length} of ${header.body.size} body bytes`,
        backend,
      );
    return { header, inline: rest };
  }
  if (rest.length !== 0)
    throw corruptManifest(key, `manifest of ${JSON.stringify(key)} has bytes after a header that declares none`, backend);
  return { header, inline: undefined };
}

/** The highest token a key has accepted for a resource, and its holder; undefined if none. */
export function entryFor(header: ManifestHeader | undefined, resource: string): Highest | undefined {
  const entry = header?.ratchet.find(([r]) => r === resource);
  return entry === undefined ? undefined : { token: BigInt(entry[1]), holder: entry[2] };
}

/** The ratchet after admitting these fences (each already checked with admits()): their entries replaced. */
function raised(header: ManifestHeader | undefined, fences: readonly CheckedFence[]): ManifestHeader["ratchet"] {
  const others = (header?.ratchet ?? []).filter(([r]) => !fences.some((f) => f.resource === r));
  return [...others, ...fences.map((f): [string, string, string | null] => [f.resource, f.token.toString(), f.holder])];
}

/** The header of a write by the key's owner that replaces `prev`: next seq, the writer's fence, the ratchet raised. */
export function nextHeader(
  prev: ManifestHeader | undefined,
  key: string,
  fence: CheckedFence,
  writeId: string,
  body: ManifestHeader["body"],
  contentType: string | undefined,
): ManifestHeader {
  return {
    format: MANIFEST_FORMAT,
    key,
    writeId,
    seq: (prev?.seq ?? 0) + 1,
    owner: fence.resource,
    token: fence.token.toString(),
    holder: fence.holder,
    ratchet: raised(prev, [fence]),
    body,
    ...(contentType === undefined ? {} : { contentType }),
    writtenAt: new Date().toISOString(),
  };
}

/** The header that hands `prev`'s key to `to`: same body and content type, both resources' entries raised. */
export function transferHeader(prev: ManifestHeader, from: CheckedFence, to: CheckedFence, writeId: string): ManifestHeader {
  return {
    ...nextHeader(prev, prev.key, to, writeId, prev.body, prev.contentType),
    ratchet: raised(prev, [from, to]),
  };
}

/**
 * What a key's current manifest (null: none), read after one of the key's data objects (or its
 * multipart upload) was seen to exist, says of it:
 * - "named": a manifest names it or can still come to — the current one names it, or it is the
 *   object of an attempt whose target is current (a create's, while the key has no manifest);
 * - "orphan": nothing can ever name it — the sweeper's rule, and the writer's own (which also
 *   deletes the objects of its attempts answered "not applied": ../s3/bodies.ts);
 * - "unexplained": its name says nothing the store can judge by (a /1 name, whose attempts are
 *   unknown), or what it says cannot happen under the protocol: its target, a manifest, existed
 *   before it did, and manifests are never deleted, so "no manifest, and the target is a writeId"
 *   means another writer's object under the prefix (another store's, say: nested prefixes are
 *   unsupported) or a manifest deleted by hand. Never treated as an orphan.
 *
 * A manifest names a data object only through the attempt it was made for (sent against the
 * manifest its name records) or a transfer that carries it over (sent against a manifest naming it).
 * Once the current manifest neither names the object nor is its attempt's target, the target was
 * replaced and never comes back, and no manifest names it to carry it over: nothing can name it again.
 */
export type DataVerdict = "named" | "orphan" | "unexplained";

export function judgeData(dataObjectKey: string, current: ManifestHeader | null): DataVerdict {
  if (current?.body.kind === "object" && current.body.dataKey === dataObjectKey) return "named";
  const target = targetOf(dataObjectKey);
  if (target === undefined) return "unexplained"; // a /1 name: its attempts are unknown
  if (target === null) return current === null ? "named" : "orphan"; // a create lands only while the key has no manifest
  if (current === null) return "unexplained"; // its target existed, and manifests are never deleted
  return current.writeId === target ? "named" : "orphan";
}

/** Whether a manifest can still come to name this data object: judgeData's verdict is not "orphan". */
export function mayBeNamed(dataObjectKey: string, current: ManifestHeader | null): boolean {
  return judgeData(dataObjectKey, current) !== "orphan";
}

/**
 * A read's data objects found missing. A body is deleted only once no manifest can name it: by the
 * writer that replaced the manifest naming it, or by the sweeper. So a body found missing is one
 * whose manifest was replaced since it was read, and the read tries the newer one. But if the same
 * manifest (its writeId: never repeated) is read again after its body was found missing, it was
 * current throughout, and its body was deleted while it named it — by hand, or by something else
 * writing under the prefix: CorruptStateError, rather than maxAttempts rounds and a ContentionError.
 */
export class MissingBodies {
  private last: string | undefined;

  constructor(private readonly key: string) {}

  /** The body `header` names was found missing: throws if it was already, under this same manifest. */
  saw(header: ManifestHeader): void {
    if (header.writeId === this.last) {
      const name = header.body.kind === "object" ? header.body.dataKey : "";
      throw new CorruptStateError(
        "s3",
        "body",
        this.key,
        `the manifest of ${JSON.stringify(this.key)} names data object ${JSON.stringify(name)}, which does not exist: it was deleted while the manifest named it`,
      );
    }
    this.last = header.writeId;
  }
}

const FenceSchema = z.strictObject({
  format: z.literal(FENCE_FORMAT),
  resource: Resource,
  token: TokenString,
  holder: Holder,
  writeId: Id,
});
const FenceV1Schema = z.strictObject({ format: z.literal(FENCE_FORMAT_V1), resource: Resource, token: TokenString, writeId: Id });

export function encodeFence(fence: CheckedFence): Buffer {
  const body: z.infer<typeof FenceSchema> = {
    format: FENCE_FORMAT,
    resource: fence.resource,
    token: fence.token.toString(),
    holder: fence.holder,
    writeId: newId(),
  };
  return Buffer.from(JSON.stringify(body), "utf8");
}

function corruptFence(resource: string, message: string, backend: StoreBackend): CorruptStateError {
  return new CorruptStateError(backend, "fence", resource, message);
}

export function decodeFence(resource: string, bytes: Buffer, backend: StoreBackend = "s3"): Highest {
  let parsed: unknown;
  try {
    parsed = JSON.parse(bytes.toString("utf8"));
  } catch {
    throw corruptFence(resource, `fence object of resource ${JSON.stringify(resource)} is not JSON`, backend);
  }
  const v1 = (parsed as { format?: unknown } | null)?.format === FENCE_FORMAT_V1;
  const result = v1 ? FenceV1Schema.safeParse(parsed) : FenceSchema.safeParse(parsed);
  if (!result.success)
    throw corruptFence(
      resource,
      `fence object of resource ${JSON.stringify(resource)} is not a ${v1 ? FENCE_FORMAT_V1 : FENCE_FORMAT} body: ${result.error.message}`,
      backend,
    );
  if (result.data.resource !== resource)
    throw corruptFence(
      resource,
      `fence object of resource ${JSON.stringify(resource)} belongs to ${JSON.stringify(result.data.resource)}`,
      backend,
    );
  return { token: BigInt(result.data.token), holder: "holder" in result.data ? result.data.holder : null };
}

/** Whether the stored fence object (null: none) refuses this fence; the error to throw if it does. */
export function fenceRefusal(fence: CheckedFence, stored: { readonly highest: Highest } | null): StaleTokenError | undefined {
  if (stored === null || admits(stored.highest, fence)) return undefined;
  return new StaleTokenError(fence.resource, fence.token, stored.highest.token, stored.highest.holder);
}

/** Whether the fence object must be raised before a write with this fence (it admits it already otherwise). */
export function needsRaise(fence: CheckedFence, stored: { readonly highest: Highest } | null): boolean {
  return stored === null || fence.token > stored.highest.token;
}
