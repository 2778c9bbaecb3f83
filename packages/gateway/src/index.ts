// "@fenced/gateway": the HTTP gateway, a package of its own, so that users of the stores never load express.
// The public API only: what embeds a gateway in a process, serves it, and describes its answers.
export { createGateway, type Gateway, type GatewayOptions, type HealthReport } from "./app.js";
export { serve, type ServeOptions, type Serving } from "./http/server.js";
export { type ApiKeyConfig } from "./auth/api-keys.js";
export { type LeaseBackendOptions, type RedisHealth } from "./routes/leases.js";
export { type BackendHealth } from "./ops/health.js";
export { type GatewayMetrics } from "./ops/metrics.js";
export { openApiDocument, type DocumentLimits, type OpenApiDocument } from "./openapi/document.js";
export { outcomeNames, PROBLEM_OF_CODE, PROBLEM_TYPES, type OutcomeNames, type ProblemKind } from "./problems/kinds.js";
export { type ProblemBody } from "./problems/problem.js";
export { type HealthAnswer, type LeaseAnswer, type WriteAnswer } from "./schemas/answers.js";
