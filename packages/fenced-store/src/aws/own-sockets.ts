import { Agent as HttpAgent } from "node:http";
import { Agent as HttpsAgent } from "node:https";

/**
 * Connections of the store's own for its conditional writes through an AWS SDK v3 client (S3's
 * conditional PUT, DynamoDB's conditional PutItem; PROTOCOL.md, "S3", "The write", step 7). Below,
 * "PUT" is that write.
 *
 * INVARIANT: a conditional PUT handed to the SDK never waits for a connection another request holds.
 * A manifest PUT is handed over in the turn its fence read's answer admitted it; in the client's
 * pool it would queue behind whatever holds the pool's sockets (another call's slow upload, a body
 * nobody reads) and land that much later, after a register of a higher token may have returned. Its
 * own agent has no socket limit: it reuses an idle connection of its own or opens one at once.
 *
 * The client's handler is copied, not changed: same class, same timeouts, agents of the same class
 * with the same options (TLS included) but no socket limit, and keep-alive on. That is done only for
 * the SDK's own Node handler as it comes (isSdkNodeHandler) over plain `http.Agent`/`https.Agent`s
 * (the default, or agents a caller made with options); over any other handler or agent (HTTP/2, a
 * proxy agent, a subclass or wrapper of the caller's own) the PUT goes through the client's handler
 * as every request does, and PROTOCOL.md says what that costs. Every other request of the store uses
 * the client's pool. The copy is made once per client handler and protocol, when first needed: a
 * later updateHttpClientConfig() is not seen by it, and the client's destroy() leaves its idle
 * connections (unref'd: they keep no process alive) to the server to close.
 */

interface Handler {
  handle(request: unknown, options: { abortSignal?: AbortSignal }): Promise<{ response: unknown }>;
}

interface NodeHandler extends Handler {
  readonly metadata?: { readonly handlerProtocol?: string };
  httpHandlerConfigs(): Record<string, unknown>;
}

/**
 * Whether the handler is the SDK's own Node handler as it comes: its class (not a subclass, whose
 * `handle` may add to each request, nor a wrapper reporting its metadata), its `handle` not replaced
 * on the instance. Anything else is the caller's, and its requests are left to it.
 */
function isSdkNodeHandler(handler: Partial<NodeHandler>): handler is NodeHandler {
  return (
    (handler as { constructor?: { name?: unknown } }).constructor?.name === "NodeHttpHandler" &&
    handler.metadata?.handlerProtocol === "http/1.1" &&
    typeof handler.httpHandlerConfigs === "function" &&
    !Object.hasOwn(handler, "handle")
  );
}

/** Per client handler, per protocol: the copy, once the agent it copies exists; null: that agent cannot be copied. */
const copies = new WeakMap<object, Map<string, Handler | null>>();

/** The same agent without its socket limit, or undefined when its class may need more than its options. */
function unlimited(agent: unknown): HttpAgent | undefined {
  if (!(agent instanceof HttpAgent) || (agent.constructor !== HttpAgent && agent.constructor !== HttpsAgent)) return undefined;
  const options = (agent as HttpAgent & { options?: object }).options ?? {};
  const Class = agent.constructor as typeof HttpAgent;
  return new Class({ ...options, keepAlive: true, maxSockets: Infinity, maxTotalSockets: Infinity });
}

/** A copy of the handler for requests of `protocol` ("http:" or "https:"); undefined: not yet possible. */
function copy(handler: NodeHandler, protocol: string): Handler | null | undefined {
  const config = handler.httpHandlerConfigs();
  const https = protocol === "https:";
  const agent = https ? config.httpsAgent : config.httpAgent;
  // The SDK's handler resolves its configuration at its first request, and makes its http agent at
  // its first http request: until then there is nothing to copy (and no pool to wait in).
  if (agent === undefined) return undefined;
  const own = unlimited(agent);
  if (own === undefined) return null;
  const { requestTimeout, connectionTimeout, socketTimeout, socketAcquisitionWarningTimeout, throwOnRequestTimeout, logger } = config;
  const Class = handler.constructor as new (options: object) => Partial<Handler>;
  const options = { requestTimeout, connectionTimeout, socketTimeout, socketAcquisitionWarningTimeout, throwOnRequestTimeout, logger };
  const made = new Class({ ...options, [https ? "httpsAgent" : "httpAgent"]: own });
  return typeof made.handle === "function" ? (made as Handler) : null;
}

/** An AWS SDK v3 client, as far as its handler goes (S3Client, DynamoDBClient). */
export interface SdkClient {
  readonly config: { readonly requestHandler: unknown };
}

/**
 * The handler a conditional PUT of this client is sent with, in place of the client's (the innermost
 * middleware of the PUT, sent-once.ts): its own connections, or undefined (the client's handler).
 */
export function ownHandler(client: SdkClient, protocol: string): Handler | undefined {
  const handler = client.config.requestHandler as Partial<NodeHandler>;
  if (!isSdkNodeHandler(handler)) return undefined;
  let byProtocol = copies.get(handler);
  const known = byProtocol?.get(protocol);
  if (known !== undefined) return known ?? undefined;
  const made = copy(handler, protocol);
  if (made === undefined) return undefined;
  if (byProtocol === undefined) copies.set(handler, (byProtocol = new Map<string, Handler | null>()));
  byProtocol.set(protocol, made);
  return made ?? undefined;
}
