import { appliedOf, markFenced, type Applied } from "./fenced-error.js";

/**
 * The caller passed something malformed: a resource, token, holder, key, option or value that no
 * correct call could contain. Thrown before any I/O, so nothing was sent and nothing written: code
 * `INVALID_ARGUMENT`, applied `"no"`. A plain TypeError or RangeError is never this: it is a bug.
 *
 * It stays a TypeError, as it was before the error contract (`err instanceof TypeError` holds, for
 * code written against earlier versions), and carries FencedError's members: `err instanceof
 * FencedError` holds too (FencedError recognises it by the contract's mark, not by its prototype chain).
 */
export class InvalidArgumentError extends TypeError {
  override readonly name = "InvalidArgumentError";
  readonly code = "INVALID_ARGUMENT";
  readonly applied: Applied = appliedOf("INVALID_ARGUMENT", undefined);
  constructor(
    /** Which argument or field was wrong, e.g. "fence.token". */
    readonly argument: string,
    /** What is wrong with it, without its name: the message is `${argument}: ${reason}`. */
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(`${argument}: ${reason}`, options);
  }
}

markFenced(InvalidArgumentError.prototype);
