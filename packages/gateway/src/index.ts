// "@fenced/gateway": the HTTP gateway, a package of its own, so that users of the stores never load express.
// The public API only: what embeds a gateway in a process, serves it, and describes its answers.
export { createGateway, type Gateway, type GatewayOptions } from "./app.js";
export { serve, type ServeOptions, type Serving } from "./http/server.js";
export { type ApiKeyConfig } from "./auth/api-keys.js";
export { openApiDocument } from "./openapi/document.js";
export { PROBLEM_OF_CODE, PROBLEM_TYPES } from "./problems/kinds.js";
