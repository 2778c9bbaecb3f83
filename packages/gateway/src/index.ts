// "@fenced/gateway": the HTTP gateway, a package of its own, so that users of the stores never load express.
export { createGateway, type Gateway, type GatewayOptions, type HealthReport } from "./app.js";
export { serve, type ServeOptions, type Serving } from "./server.js";
export { loadConfig, configSchema, type ConfigFlags, type GatewayConfig } from "./config.js";
export { type ApiKeyConfig, type Principal } from "./auth.js";
export { type Limits } from "./context.js";
export { GatewayMetrics } from "./metrics.js";
export { PROBLEM_TYPES, type ProblemBody } from "./problem.js";
export { openApiDocument, type DocumentLimits, type OpenApiDocument } from "./openapi.js";
export { encodeLeaseId, decodeLeaseId, type LeaseIdParts } from "./lease-id.js";
export { type LeaseBackendOptions, type RedisHealth } from "./routes-leases.js";
export { TOKEN_PATTERN } from "./validation.js";
