// "@fenced/gateway": the HTTP gateway, a package of its own, so that users of the stores never load express.
export { createGateway, type Gateway, type GatewayOptions, type HealthReport } from "./app.js";
export { serve, type ServeOptions, type Serving } from "./http/server.js";
export { loadConfig, configSchema, type ConfigFlags, type GatewayConfig } from "./config.js";
export { type ApiKeyConfig, type Principal } from "./auth/api-keys.js";
export { type Limits } from "./http/context.js";
export { GatewayMetrics } from "./ops/metrics.js";
export { PROBLEM_TYPES, type ProblemBody } from "./problems/problem.js";
export { openApiDocument, type DocumentLimits, type OpenApiDocument } from "./openapi/document.js";
export { encodeLeaseId, decodeLeaseId, type LeaseIdParts } from "./auth/lease-id.js";
export { type LeaseBackendOptions, type RedisHealth } from "./routes/leases.js";
export { TOKEN_PATTERN } from "./schemas/validation.js";
