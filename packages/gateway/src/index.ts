// "@fenced/gateway": the HTTP gateway, a package of its own, so that users of the stores never load express.
// The public API only: what embeds a gateway in a process, serves it, and describes its answers.
import { createGatewayOn, type Gateway, type GatewayOptions } from "./app.js";
import { EVERY_DRIVER } from "./stores/drivers.js";

export type { Gateway, GatewayOptions };
export { serve, type ServeOptions, type Serving } from "./http/server.js";
export { type ApiKeyConfig } from "./auth/api-keys.js";
export { openApiDocument } from "./openapi/document.js";
export { PROBLEM_OF_CODE, PROBLEM_TYPES } from "./problems/kinds.js";

/**
 * The HTTP gateway: an express app over the fenced stores and the lock. It keeps no state between
 * requests — every ratchet lives in Postgres/S3 and every lease in Redis, and a lease id carries what
 * any instance needs to extend or release it — so any number of instances can serve one deployment.
 */
export function createGateway(options: GatewayOptions): Gateway {
  return createGatewayOn(options, EVERY_DRIVER);
}
