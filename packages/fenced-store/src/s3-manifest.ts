import { createHash, randomBytes } from "node:crypto";
import { z } from "zod";
import { MAX_TOKEN } from "./fence.js";

/**
 * The S3 layout and the two small objects that carry the ratchet.
 *
 *   <prefix>manifests/<key>         one per key: the compare-and-swapped pointer (header + inline body)
 *   <prefix>data/<key>/<dataId>     bodies too large to inline, written once, never overwritten
 *   <prefix>fences/<sha256(resource)> one per resource: the highest token registered for it
 *
 * Every manifest and fence body carries a fresh random writeId, so no two writes ever produce the
 * same bytes and so the same ETag: an ETag that was replaced can never come back (no ABA).
 */

export const MANIFEST_FORMAT = "fenced-s3-manifest/1";
export const FENCE_FORMAT = "fenced-s3-fence/1";

/** 128 random bits, hex: names a write (version) or a data object. */
export function newId(): string {
  return randomBytes(16).toString("hex");
}

export function manifestKey(prefix: string, key: string): string {
  return `${prefix}manifests/${key}`;
}

/** The id is the last segment and never contains '/', so (key, id) pairs never collide. */
export function dataKey(prefix: string, key: string, dataId: string): string {
  return `${prefix}data/${key}/${dataId}`;
}

/**
 * Resources are arbitrary strings of up to 512 characters, which may not fit S3's 1024-byte key limit
 * once encoded; a hash always does. The fence body names the resource, so a collision would be detected.
 */
export function fenceKey(prefix: string, resource: string): string {
  return `${prefix}fences/${createHash("sha256").update(resource, "utf8").digest("hex")}`;
}

export function probeKeyPrefix(prefix: string): string {
  return `${prefix}probe/`;
}

const TokenString = z
  .string()
  .regex(/^(0|[1-9][0-9]{0,18})$/)
  .refine((s) => BigInt(s) <= MAX_TOKEN);
const Id = z.string().regex(/^[0-9a-f]{32}$/);

const ManifestHeaderSchema = z.strictObject({
  format: z.literal(MANIFEST_FORMAT),
  key: z.string(),
  /** Unique per write attempt: the version callers see, and how an ambiguous outcome is resolved. */
  writeId: Id,
  /** 1 for the first write of the key, +1 per accepted write: the order in which writes were accepted. */
  seq: z.number().int().positive(),
  /** The fence of the write that produced this version. */
  resource: z.string(),
  token: TokenString,
  /**
   * The per-object ratchet: the highest token accepted on this key, per resource, as [resource, token]
   * pairs (a list, not an object: a resource may be named "__proto__").
   */
  tokens: z.array(z.tuple([z.string(), TokenString])),
  /** Where the body is: after the header line (inline), in a data object, or nowhere (tombstone). */
  body: z.discriminatedUnion("kind", [
    z.strictObject({ kind: z.literal("inline"), size: z.number().int().nonnegative() }),
    z.strictObject({ kind: z.literal("object"), dataKey: z.string() }),
    z.strictObject({ kind: z.literal("tombstone") }),
  ]),
  contentType: z.string().optional(),
  writtenAt: z.string(),
});

export type ManifestHeader = z.infer<typeof ManifestHeaderSchema>;

const NEWLINE = 0x0a;

/** A manifest is one JSON line (the header), then the inline body bytes, if any. */
export function encodeManifest(header: ManifestHeader, inline?: Uint8Array): Buffer {
  const head = Buffer.from(`${JSON.stringify(header)}\n`, "utf8");
  return inline === undefined ? head : Buffer.concat([head, inline]);
}

/** Parses and checks a stored manifest; anything unexpected is an error, never a guess. */
export function decodeManifest(key: string, bytes: Buffer): { header: ManifestHeader; inline: Buffer | undefined } {
  const newline = bytes.indexOf(NEWLINE);
  if (newline < 0) throw new Error(`manifest of ${JSON.stringify(key)} has no header line`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(bytes.subarray(0, newline).toString("utf8"));
  } catch {
    throw new Error(`manifest of ${JSON.stringify(key)} has a header that is not JSON`);
  }
  const result = ManifestHeaderSchema.safeParse(parsed);
  if (!result.success) throw new Error(`manifest of ${JSON.stringify(key)} is not a ${MANIFEST_FORMAT} header: ${result.error.message}`);
  const header = result.data;
  if (header.key !== key) throw new Error(`manifest at ${JSON.stringify(key)} names another key, ${JSON.stringify(header.key)}`);
  const rest = bytes.subarray(newline + 1);
  if (header.body.kind === "inline") {
    if (rest.length !== header.body.size) throw new Error(`manifest of ${JSON.stringify(key)} is truncated: ${rest.length} of ${header.body.size} body bytes`);
    return { header, inline: rest };
  }
  if (rest.length !== 0) throw new Error(`manifest of ${JSON.stringify(key)} has bytes after a header that declares none`);
  return { header, inline: undefined };
}

/** The highest token the manifest has accepted for a resource, if any. */
export function highestFor(header: ManifestHeader | undefined, resource: string): bigint | undefined {
  const pair = header?.tokens.find(([r]) => r === resource);
  return pair === undefined ? undefined : BigInt(pair[1]);
}

/** The ratchet after accepting `token` for `resource`: that resource's entry raised, the others kept. */
function raisedTokens(header: ManifestHeader | undefined, resource: string, token: bigint): [string, string][] {
  const others = (header?.tokens ?? []).filter(([r]) => r !== resource);
  const previous = highestFor(header, resource);
  const highest = previous !== undefined && previous > token ? previous : token;
  return [...others, [resource, highest.toString()]];
}

const FenceSchema = z.strictObject({
  format: z.literal(FENCE_FORMAT),
  resource: z.string(),
  token: TokenString,
  writeId: Id,
});

export type FenceBody = z.infer<typeof FenceSchema>;

export function encodeFence(resource: string, token: bigint): Buffer {
  const body: FenceBody = { format: FENCE_FORMAT, resource, token: token.toString(), writeId: newId() };
  return Buffer.from(JSON.stringify(body), "utf8");
}

export function decodeFence(resource: string, bytes: Buffer): bigint {
  let parsed: unknown;
  try {
    parsed = JSON.parse(bytes.toString("utf8"));
  } catch {
    throw new Error(`fence object of resource ${JSON.stringify(resource)} is not JSON`);
  }
  const result = FenceSchema.safeParse(parsed);
  if (!result.success) throw new Error(`fence object of resource ${JSON.stringify(resource)} is not a ${FENCE_FORMAT} body: ${result.error.message}`);
  if (result.data.resource !== resource) throw new Error(`fence object of resource ${JSON.stringify(resource)} belongs to ${JSON.stringify(result.data.resource)}`);
  return BigInt(result.data.token);
}

/** The header of the write that replaces `prev`: next seq, the writer's fence, the ratchet raised. */
export function nextHeader(
  prev: ManifestHeader | undefined,
  key: string,
  fence: { readonly resource: string; readonly token: bigint },
  writeId: string,
  body: ManifestHeader["body"],
  contentType: string | undefined,
): ManifestHeader {
  return {
    format: MANIFEST_FORMAT,
    key,
    writeId,
    seq: (prev?.seq ?? 0) + 1,
    resource: fence.resource,
    token: fence.token.toString(),
    tokens: raisedTokens(prev, fence.resource, fence.token),
    body,
    ...(contentType === undefined ? {} : { contentType }),
    writtenAt: new Date().toISOString(),
  };
}
