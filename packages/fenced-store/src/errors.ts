/**
 * A write carried a fencing token lower than the highest the storage has already accepted for the
 * same resource — or equal to it but presented by another holder (another lease that was handed the
 * same token, which only a lock that lost its counters does). Nothing was written. HTTP: 409.
 */
export class StaleTokenError extends Error {
  override readonly name = "StaleTokenError";
  readonly status = 409;
  constructor(
    readonly resource: string,
    readonly token: bigint,
    readonly highest: bigint,
    /** The holder that presented `highest` (null: a fence without a holder), when the store knows it. */
    readonly highestHolder?: string | null,
  ) {
    super(
      token === highest
        ? `fencing token ${token} for resource ${JSON.stringify(resource)} was already accepted from another holder${highestHolder == null ? "" : ` (${highestHolder})`}`
        : `stale fencing token ${token} for resource ${JSON.stringify(resource)}: the storage has accepted ${highest}`,
    );
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

/**
 * The key belongs to another resource: it was created under `owner`, and a write, delete or
 * conditional write naming `resource` may not touch it (the ratchet of `resource` says nothing about
 * `owner`'s holders). Nothing was written. Moving a key between resources is `transfer()`. HTTP: 409.
 */
export class ResourceMismatchError extends Error {
  override readonly name = "ResourceMismatchError";
  readonly status = 409;
  constructor(
    readonly key: string,
    readonly resource: string,
    readonly owner: string,
  ) {
    super(`key ${JSON.stringify(key)} belongs to resource ${JSON.stringify(owner)}, not ${JSON.stringify(resource)}`);
  }
}

/**
 * The store gave up: the key kept changing under it (writers racing on one key) for as many rounds as
 * it was allowed. Nothing of this call was acknowledged; the same call may well succeed a moment
 * later. HTTP: 503.
 */
export class ContentionError extends Error {
  override readonly name = "ContentionError";
  readonly status = 503;
  constructor(
    readonly key: string,
    readonly attempts: number,
    message: string,
  ) {
    super(message);
  }
}
