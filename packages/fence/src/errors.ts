/**
 * The caller passed something malformed: a resource, token, holder, key, option or value that no
 * correct call could contain. Thrown before any I/O, so nothing was sent and nothing written.
 * HTTP: 400. A plain TypeError or RangeError is never this: it is a bug, and a gateway answers 500.
 */
export class InvalidArgumentError extends TypeError {
  override readonly name = "InvalidArgumentError";
  readonly code = "invalid-argument";
  constructor(
    /** Which argument or field was wrong, e.g. "fence.token". */
    readonly argument: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${argument}: ${message}`, options);
  }
}
