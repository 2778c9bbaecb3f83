import { InvalidArgumentError } from "@fenced/fence";
import { checkResourceFenceOption, integerIn, prefixOption } from "../cas/options.js";
import type { CasOptions } from "../cas/io.js";
import { optionsObject, timeoutOption } from "../options.js";

export interface FencedDynamoOptions {
  /**
   * The table the store keeps its items in: partition key `key`, a String, and no sort key. The store
   * owns every item under its prefix; nothing else may write them.
   */
  readonly table: string;
  /** Prefix of every item's key the store writes; default "fenced/". Empty, or ending in "/". */
  readonly prefix?: string | undefined;
  /**
   * Whether writes also read (and raise) the resource's fence item, right before each manifest
   * write, so that a token refused by register() is refused on every key. Default true.
   */
  readonly checkResourceFence?: boolean | undefined;
  /** Conditional-write rounds per write before giving up (ContentionError). Default 64. */
  readonly maxAttempts?: number | undefined;
  /**
   * How long one call may wait for DynamoDB, in milliseconds (default 5,000; 100 to 600,000): the
   * call settles by then with its result, StoreUnavailableError ("timeout": nothing was applied) or
   * OutcomeUnknownError (a manifest write was sent and its answer did not come in time).
   */
  readonly timeoutMs?: number | undefined;
}

export interface ResolvedOptions extends CasOptions {
  readonly table: string;
}

/** DynamoDB's table names: 3 to 255 of letters, digits, '_', '-' and '.'. */
const TABLE_NAME = /^[A-Za-z0-9_.-]{3,255}$/;

export function validateOptions(options: unknown): ResolvedOptions {
  const o = optionsObject(options, "{ table, prefix? }");
  if (typeof o.table !== "string") throw new InvalidArgumentError("table", "must be a string");
  if (!TABLE_NAME.test(o.table)) throw new InvalidArgumentError("table", `${JSON.stringify(o.table)} is not a valid DynamoDB table name`);
  return {
    table: o.table,
    prefix: prefixOption(o.prefix),
    checkResourceFence: checkResourceFenceOption(o.checkResourceFence),
    maxAttempts: integerIn("maxAttempts", o.maxAttempts, 1, 10_000, 64),
    timeoutMs: timeoutOption(o.timeoutMs, "timeoutMs"),
  };
}
