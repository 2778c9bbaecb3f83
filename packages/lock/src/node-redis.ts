import { InvalidArgumentError } from "@fenced/fence";
import type { RedisClient } from "./client.js";

/**
 * A node-redis client (the `redis` package, 5 or 6, from `createClient`) as a lock node: the one
 * adapter between its API and the shape the lock sends to (client.ts). It creates no client and
 * imports nothing from `redis`; the user's own client, connected by them, carries every command.
 *
 *   scripts      evalsha/eval (numberOfKeys, ...keysAndArgs) → evalSha/eval (script, { keys, arguments }),
 *                every argument a string (node-redis sends no numbers); SCRIPT LOAD → scriptLoad
 *   errors       an error reply (node-redis's ErrorReply) → an Error named "ReplyError", the name the
 *                lock classifies replies by (redisErrorCode), so NOSCRIPT and WRONGTYPE read alike on
 *                every client; any other error (a system error, ClientOfflineError) passes as it is
 *   connection   isOpen/isReady → status ("end", "ready", "reconnecting"), and the client's own events
 *                (error, connect, end), which node-watch.ts listens to
 *
 * Every command goes through `withCommandOptions` with the options the lock's order and parsing need
 * (COMMAND_OPTIONS), whatever defaults the user's client has. No pipeline: node-redis already writes
 * the commands of one tick together. A cluster client (`createCluster`) or a pool
 * (`createClientPool`) is refused: give the lock one client per node. node-redis's error replies are
 * recognised by their class's name (isErrorReply): a bundler that renames classes (minified without
 * keeping names) hides them, and a node that lost its script cache then fails each call.
 */

type Listener = (...args: unknown[]) => void;

/** The script commands the adapter sends, on the client or on the proxy withCommandOptions makes. */
interface NodeRedisCommands {
  evalSha(sha1: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  scriptLoad(script: string): Promise<unknown>;
  ping(): Promise<unknown>;
}

/** What the adapter uses of a node-redis client; `createClient()` of redis 5 or 6 fits it. */
export interface NodeRedisClient extends NodeRedisCommands {
  withCommandOptions(options: { asap: boolean; typeMapping: Record<never, never> }): unknown;
  readonly isOpen: boolean;
  readonly isReady: boolean;
  on(event: string | symbol, listener: Listener): unknown;
  removeListener(event: string | symbol, listener: Listener): unknown;
  listenerCount(event: string | symbol, listener?: Listener): number;
}

/**
 * The options every command of the adapter goes with, whatever the client's defaults: `asap` off,
 * since a command put ahead of the queue could overtake one the lock sent before it (a RELEASE its
 * ACQUIRE); no `typeMapping`, since the lock reads integers as numbers and counters as strings.
 */
const COMMAND_OPTIONS = { asap: false, typeMapping: {} } as const;

/** One adapter per client: its watch (node-watch.ts) adds listeners to the client once, not once per call. */
const adapters = new WeakMap<object, RedisClient>();

/** A Redis error reply, named as ioredis names its own; the node-redis error is its `cause`. */
class ReplyError extends Error {
  override readonly name = "ReplyError";
}

/**
 * node-redis's error replies are instances of its `ErrorReply` (SimpleError and BlobError extend
 * it), which set no `name`. Its class is found by the constructor's name along the prototype chain:
 * importing the class would make `redis` a dependency, and two majors may be installed at once.
 */
function isErrorReply(err: unknown): err is Error {
  if (!(err instanceof Error)) return false;
  for (let proto: unknown = Object.getPrototypeOf(err); proto !== null && proto !== Error.prototype; proto = Object.getPrototypeOf(proto)) {
    if ((proto as { constructor?: { name?: unknown } }).constructor?.name === "ErrorReply") return true;
  }
  return false;
}

function replyErrors(err: unknown): never {
  throw isErrorReply(err) ? new ReplyError(err.message, { cause: err }) : err;
}

function split(numberOfKeys: number, keysAndArgs: readonly (string | number)[]): { keys: string[]; arguments: string[] } {
  return { keys: keysAndArgs.slice(0, numberOfKeys).map(String), arguments: keysAndArgs.slice(numberOfKeys).map(String) };
}

/**
 * The lock node for a user's node-redis client: `new Redlock([fromNodeRedis(a), fromNodeRedis(b), …])`.
 * The same client always gives the same node.
 */
export function fromNodeRedis(client: NodeRedisClient): RedisClient {
  const c = client as unknown as Record<string, unknown> | null;
  if (
    typeof c !== "object" ||
    c === null ||
    typeof c.evalSha !== "function" ||
    typeof c.withCommandOptions !== "function" ||
    typeof c.isReady !== "boolean"
  )
    throw new InvalidArgumentError("client", "must be a node-redis client (createClient() of redis 5 or 6)");
  // A cluster client or a pool spreads commands over several connections, in no order the lock can rely on.
  if ("masters" in c || "totalClients" in c)
    throw new InvalidArgumentError("client", "is a node-redis cluster client or pool: give the lock one createClient() per node");
  let adapter = adapters.get(client);
  if (adapter === undefined) {
    adapter = adapt(client);
    adapters.set(client, adapter);
  }
  return adapter;
}

function adapt(client: NodeRedisClient): RedisClient {
  const commands = client.withCommandOptions(COMMAND_OPTIONS) as NodeRedisCommands;
  return {
    evalsha: (sha, numberOfKeys, ...keysAndArgs) => commands.evalSha(sha, split(numberOfKeys, keysAndArgs)).catch(replyErrors),
    eval: (script, numberOfKeys, ...keysAndArgs) => commands.eval(script, split(numberOfKeys, keysAndArgs)).catch(replyErrors),
    script: (_load, script) => commands.scriptLoad(script).catch(replyErrors),
    ping: () => commands.ping().catch(replyErrors),
    get status() {
      return !client.isOpen ? "end" : client.isReady ? "ready" : "reconnecting";
    },
    on: (event: string | symbol, listener: Listener) => client.on(event, listener),
    removeListener: (event: string | symbol, listener: Listener) => client.removeListener(event, listener),
    listenerCount: (event: string | symbol, listener?: Listener) => client.listenerCount(event, listener),
  } as RedisClient;
}
