import { InvalidArgumentError } from "@fenced/fence";
import type { RedisClient } from "./client.js";
import { SCRIPTS } from "./scripts.js";

/**
 * A Valkey GLIDE client (`@valkey/valkey-glide` 2, `GlideClient.createClient()`) as a lock node: the
 * one adapter between its API and the shape the lock sends to (client.ts). It creates no client and
 * imports nothing from GLIDE; the user's own client carries every command.
 *
 *   scripts      every script call goes as EVAL with the script's text, never EVALSHA: GLIDE reports a
 *                server's error reply only as prose (its RequestError carries no code), so a NOSCRIPT
 *                answer could not be told apart without reading text. An EVAL cannot be answered
 *                NOSCRIPT (the server caches the script by its hash), so the lock's fallBack never
 *                has anything to do here. SCRIPT LOAD and PING pass as they are.
 *   errors       GLIDE's errors pass as they are: a node's failure reads `error` with the message as
 *                its detail and no code (a timeout of GLIDE's own `requestTimeout` too)
 *   connection   none to watch: GLIDE reconnects on its own and has no connection events, so a node
 *                that is down reads as its commands' errors, or as `timeout`, never as known down
 *
 * No pipeline: GLIDE multiplexes one connection per node. A cluster client (`GlideClusterClient`) is
 * refused: give the lock one `GlideClient` per node.
 */

/** What the adapter uses of a GLIDE client; `GlideClient` of @valkey/valkey-glide 2 fits it. */
export interface ValkeyGlideClient {
  customCommand(args: string[], options?: { decoder?: number }): Promise<unknown>;
  ping(): Promise<unknown>;
}

/**
 * GLIDE's `Decoder.String` (its enum: Bytes 0, String 1), given with every command whatever the
 * client's `defaultDecoder`: the lock reads a counter past 2^52 as a decimal string, not bytes.
 */
const AS_STRINGS = { decoder: 1 } as const;

/** Each script's text by its SHA-1: what EVALSHA names, EVAL sends. */
const SOURCES: ReadonlyMap<string, string> = new Map(Object.values(SCRIPTS).map((s) => [s.sha, s.source]));

/** The lock node for a user's GLIDE client: `new Redlock([fromValkeyGlide(a), fromValkeyGlide(b), …])`. */
export function fromValkeyGlide(client: ValkeyGlideClient): RedisClient {
  const c = client as unknown as Record<string, unknown> | null;
  if (typeof c !== "object" || c === null || typeof c.customCommand !== "function" || typeof c.ping !== "function")
    throw new InvalidArgumentError("client", "must be a Valkey GLIDE client (GlideClient.createClient() of @valkey/valkey-glide 2)");
  if (typeof c.invokeScriptWithRoute === "function")
    throw new InvalidArgumentError("client", "is a GLIDE cluster client: give the lock one GlideClient per node");
  const run = (
    command: "EVAL" | "EVALSHA",
    script: string,
    numberOfKeys: number,
    keysAndArgs: readonly (string | number)[],
  ): Promise<unknown> => client.customCommand([command, script, String(numberOfKeys), ...keysAndArgs.map(String)], AS_STRINGS);
  return {
    evalsha: (sha, numberOfKeys, ...keysAndArgs) => {
      const source = SOURCES.get(sha);
      // Not one of the lock's scripts (the lock sends no other): as EVALSHA, for whoever calls it.
      return source === undefined ? run("EVALSHA", sha, numberOfKeys, keysAndArgs) : run("EVAL", source, numberOfKeys, keysAndArgs);
    },
    eval: (script, numberOfKeys, ...keysAndArgs) => run("EVAL", script, numberOfKeys, keysAndArgs),
    script: (_load, script) => client.customCommand(["SCRIPT", "LOAD", script], AS_STRINGS),
    ping: () => client.ping(),
  };
}
