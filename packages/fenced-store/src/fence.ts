/**
 * All the storage ever learns about a lock: which resource the token belongs to and the token.
 * A Lease from @fenced/lock satisfies it.
 */
export interface Fence {
  readonly resource: string;
  readonly token: bigint;
}

/** Tokens are stored as SQL bigint / decimal strings; anything outside 0..2^63-1 cannot be compared safely. */
export const MAX_TOKEN = (1n << 63n) - 1n;
export const MAX_RESOURCE_LENGTH = 512;
export const MAX_KEY_LENGTH = 512;

// Control characters (C0, DEL, C1) never belong in a resource or key: they break logs, headers and S3 keys.
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/** Throws TypeError/RangeError before any I/O if the fence is malformed. */
export function assertFence(fence: unknown): asserts fence is Fence {
  if (typeof fence !== "object" || fence === null) throw new TypeError("fence must be an object { resource, token }");
  const { resource, token } = fence as { resource?: unknown; token?: unknown };
  assertResource(resource);
  if (typeof token !== "bigint") throw new TypeError(`fence.token must be a bigint, got ${typeof token}`);
  if (token < 0n || token > MAX_TOKEN) throw new RangeError(`fence.token must be between 0 and ${MAX_TOKEN}, got ${token}`);
}

export function assertResource(resource: unknown): asserts resource is string {
  if (typeof resource !== "string") throw new TypeError("resource must be a string");
  if (resource.length === 0) throw new RangeError("resource must not be empty");
  if (resource.length > MAX_RESOURCE_LENGTH) throw new RangeError(`resource must be at most ${MAX_RESOURCE_LENGTH} characters`);
  if (CONTROL.test(resource)) throw new RangeError("resource must not contain control characters");
}

/**
 * Keys name records and objects. Besides length and control characters, `.`/`..` segments and
 * leading or doubled slashes are refused so that a key can never address something outside its prefix.
 */
export function assertKey(key: unknown): asserts key is string {
  if (typeof key !== "string") throw new TypeError("key must be a string");
  if (key.length === 0) throw new RangeError("key must not be empty");
  if (Buffer.byteLength(key, "utf8") > MAX_KEY_LENGTH) throw new RangeError(`key must be at most ${MAX_KEY_LENGTH} bytes`);
  if (CONTROL.test(key)) throw new RangeError("key must not contain control characters");
  if (key.startsWith("/")) throw new RangeError("key must not start with '/'");
  for (const segment of key.split("/")) {
    if (segment === "") throw new RangeError("key must not contain empty segments ('//' or a trailing '/')");
    if (segment === "." || segment === "..") throw new RangeError("key must not contain '.' or '..' segments");
  }
}
