/**
 * A write carried a fencing token lower than the highest the storage has already accepted
 * for the same resource. Nothing was written. HTTP: 409.
 */
export class StaleTokenError extends Error {
  override readonly name = "StaleTokenError";
  readonly status = 409;
  constructor(
    readonly resource: string,
    readonly token: bigint,
    readonly highest: bigint,
  ) {
    super(`stale fencing token ${token} for resource ${JSON.stringify(resource)}: the storage has accepted ${highest}`);
  }
}

/**
 * The caller's `ifVersion` precondition did not hold: the record changed since it was read
 * (or does not exist). Nothing was written. HTTP: 412.
 */
export class VersionMismatchError extends Error {
  override readonly name = "VersionMismatchError";
  readonly status = 412;
  constructor(
    readonly key: string,
    readonly expected: string,
    readonly actual: string | undefined,
  ) {
    super(`version mismatch on ${JSON.stringify(key)}: expected ${expected}, found ${actual ?? "no record"}`);
  }
}
