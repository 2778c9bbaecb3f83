import { checkFence, CONTROL_CHARACTER, InvalidArgumentError, type Fence } from "@fenced/fence";

/** A fence is defined once, in @fenced/fence; the store knows it only structurally. */
export { type CheckedFence, type Fence, admits, assertResource, checkFence, MAX_TOKEN } from "@fenced/fence";

export const MAX_KEY_LENGTH = 512;

/**
 * Keys name records and objects. Besides length and control characters, `.`/`..` segments and
 * leading or doubled slashes are refused so that a key can never address something outside its prefix.
 */
export function assertKey(key: unknown, argument = "key"): asserts key is string {
  if (typeof key !== "string") throw new InvalidArgumentError(argument, `must be a string, got ${typeof key}`);
  if (key.length === 0) throw new InvalidArgumentError(argument, "must not be empty");
  if (Buffer.byteLength(key, "utf8") > MAX_KEY_LENGTH) throw new InvalidArgumentError(argument, `must be at most ${MAX_KEY_LENGTH} bytes`);
  if (CONTROL_CHARACTER.test(key)) throw new InvalidArgumentError(argument, "must not contain control characters");
  if (key.startsWith("/")) throw new InvalidArgumentError(argument, "must not start with '/'");
  for (const segment of key.split("/")) {
    if (segment === "") throw new InvalidArgumentError(argument, "must not contain empty segments ('//' or a trailing '/')");
    if (segment === "." || segment === "..") throw new InvalidArgumentError(argument, "must not contain '.' or '..' segments");
  }
}

/** Throws InvalidArgumentError before any I/O if the fence is malformed. Prefer checkFence, which also copies. */
export function assertFence(fence: unknown): asserts fence is Fence {
  checkFence(fence);
}
