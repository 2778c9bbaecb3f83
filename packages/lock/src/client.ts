/**
 * What the lock needs of a Redis connection: the few commands it sends, typed structurally, so
 * that a user's ioredis 5 or ioredis 6 client (`Redis`, `Redis<"legacy">`, `Cluster`), or iovalkey's
 * (Valkey's fork of ioredis 5), fits without this package importing any of them. A node's client
 * decides where commands go; the lock only ever addresses the keys of one resource per script,
 * which share one Cluster slot (keys.ts).
 */
export interface RedisClient {
  evalsha(sha: string, numberOfKeys: number, ...keysAndArgs: (string | number)[]): Promise<unknown>;
  eval(script: string, numberOfKeys: number, ...keysAndArgs: (string | number)[]): Promise<unknown>;
  script(subcommand: "LOAD", script: string): Promise<unknown>;
  /** Not sent by the lock itself: lets whoever holds `redlock.clients` check the nodes' health. */
  ping(): Promise<unknown>;
  /** Where present, the scripts of one tick go out as one pipeline (pipelining.ts); optional. */
  pipeline?(): RedisPipeline;
  /** True on a Redis Cluster client (ioredis's `Cluster`): its pipelines must keep to one slot. */
  readonly isCluster?: boolean;
  /** ioredis's connection status; a Cluster client's pipelines wait for "ready" (pipelining.ts). */
  readonly status?: string;
}

/** The part of an ioredis pipeline the lock uses. */
export interface RedisPipeline {
  evalsha(sha: string, numberOfKeys: number, ...keysAndArgs: (string | number)[]): unknown;
  exec(): Promise<[error: Error | null, result: unknown][] | null>;
}

/**
 * The error code of a Redis error reply: its first word ("NOSCRIPT", "WRONGTYPE", "ERR", …), or
 * undefined for anything that is not an error reply (a connection error, a client-side timeout).
 * Redis starts every error reply with such a code: it is the protocol's only classification of
 * errors, and the rest of the text is free prose. Both ioredis majors and iovalkey surface an error
 * reply as an Error named "ReplyError" whose message is the reply's text.
 */
export function redisErrorCode(err: unknown): string | undefined {
  if (!(err instanceof Error) || err.name !== "ReplyError") return undefined;
  const space = err.message.indexOf(" ");
  return space === -1 ? err.message : err.message.slice(0, space);
}
