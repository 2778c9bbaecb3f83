import { assertFence, assertKey, type Fence } from "./fence.js";

export interface FencedS3Options {
  readonly bucket: string;
  /** Prefix of every object the store writes; default "fenced/". Empty, or ending in "/". */
  readonly prefix?: string;
  /**
   * Bodies in memory up to this many bytes are stored inside the manifest: one PUT per write and one
   * GET per read. Larger bodies and all streams go to their own data object. Default 64 KiB; 0 = never.
   */
  readonly inlineLimit?: number;
  /**
   * Whether put/delete/update also read (and raise) the resource's fence object, so that a token
   * refused by register() is refused on every key. Default true. False leaves the per-object ratchet
   * only, and saves one GET per write. See PROTOCOL.md, "S3".
   */
  readonly checkResourceFence?: boolean;
  /** Conditional-write rounds per write, and read-modify-write rounds per update(), before giving up. Default 64. */
  readonly maxAttempts?: number;
  /** Multipart part size for streams of unknown length (memory held: 4 parts). Default 8 MiB, minimum 5 MiB. */
  readonly partSize?: number;
}

export interface S3WriteOptions {
  /** The lease's fence. Refused (StaleTokenError) if a higher token was accepted for fence.resource. */
  readonly fence: Fence;
  /** Write only if the key is still at this version (from get/put/delete); else VersionMismatchError. */
  readonly ifVersion?: string;
  readonly contentType?: string;
  /** Length of a stream body, if known: one streamed PUT instead of a multipart upload. */
  readonly contentLength?: number;
}

export interface S3DeleteOptions {
  readonly fence: Fence;
  readonly ifVersion?: string;
}

export interface S3UpdateOptions {
  readonly fence: Fence;
  /** Default: the content type of the version read. */
  readonly contentType?: string;
  /** Read-modify-write rounds before giving up; default the store's maxAttempts. */
  readonly maxAttempts?: number;
}

export interface ResolvedOptions {
  readonly bucket: string;
  readonly prefix: string;
  readonly inlineLimit: number;
  readonly checkResourceFence: boolean;
  readonly maxAttempts: number;
  readonly partSize: number;
}

const MiB = 1024 * 1024;

function integerIn(name: string, value: unknown, min: number, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value)) throw new TypeError(`${name} must be an integer`);
  if (value < min || value > max) throw new RangeError(`${name} must be between ${min} and ${max}, got ${value}`);
  return value;
}

export function validateOptions(options: unknown): ResolvedOptions {
  if (typeof options !== "object" || options === null) throw new TypeError("options must be an object { bucket, prefix? }");
  const o = options as Record<string, unknown>;
  if (typeof o.bucket !== "string") throw new TypeError("bucket must be a string");
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(o.bucket)) throw new RangeError(`bucket ${JSON.stringify(o.bucket)} is not a valid S3 bucket name`);
  const prefix = o.prefix ?? "fenced/";
  if (typeof prefix !== "string") throw new TypeError("prefix must be a string");
  if (prefix !== "") {
    if (!prefix.endsWith("/")) throw new RangeError('prefix must be empty or end with "/"');
    if (Buffer.byteLength(prefix) > 256) throw new RangeError("prefix must be at most 256 bytes");
    // Same rules as keys, so the store's objects never land outside the prefix.
    assertKey(prefix.slice(0, -1));
  }
  if (o.checkResourceFence !== undefined && typeof o.checkResourceFence !== "boolean") throw new TypeError("checkResourceFence must be a boolean");
  return {
    bucket: o.bucket,
    prefix,
    inlineLimit: integerIn("inlineLimit", o.inlineLimit, 0, 4 * MiB, 64 * 1024),
    checkResourceFence: o.checkResourceFence ?? true,
    maxAttempts: integerIn("maxAttempts", o.maxAttempts, 1, 10_000, 64),
    partSize: integerIn("partSize", o.partSize, 5 * MiB, 5 * 1024 * MiB, 8 * MiB),
  };
}

const VERSION = /^[0-9a-f]{32}$/;

export interface CheckedWriteOptions {
  readonly fence: Fence;
  readonly ifVersion: string | undefined;
  readonly contentType: unknown;
  readonly contentLength: unknown;
  readonly maxAttempts: number | undefined;
}

/** Checks the common options before any I/O; copies the fence, so a caller mutating it mid-write changes nothing. */
export function writeOptions(options: unknown): CheckedWriteOptions {
  if (typeof options !== "object" || options === null) throw new TypeError("options must be an object { fence, ... }");
  const { fence, ifVersion, contentType, contentLength, maxAttempts } = options as Record<string, unknown>;
  assertFence(fence);
  if (ifVersion !== undefined) {
    if (typeof ifVersion !== "string") throw new TypeError(`ifVersion must be a string (a version returned by put/get/delete), got ${typeof ifVersion}`);
    if (!VERSION.test(ifVersion)) throw new RangeError(`ifVersion ${JSON.stringify(ifVersion)} is not a version this store issues`);
  }
  return {
    fence: { resource: fence.resource, token: fence.token },
    ifVersion,
    contentType,
    contentLength,
    maxAttempts: maxAttempts === undefined ? undefined : integerIn("maxAttempts", maxAttempts, 1, 10_000, 1),
  };
}
