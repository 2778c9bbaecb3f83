// Types "@fenced/gateway" exported in 0.1.0 that a user names through the API itself (or reads in the
// OpenAPI document): each stays here, deprecated, until 0.3.0.
import type * as health from "./ops/readiness.js";
import type * as answers from "./schemas/answers.js";
import type * as app from "./app.js";
import type * as metrics from "./ops/metrics.js";
import type * as leases from "./routes/leases.js";
import type * as openapi from "./openapi/types.js";
import type * as problem from "./problems/problem.js";
import type * as kinds from "./problems/kinds.js";

/** @deprecated A check of `HealthAnswer`; the OpenAPI document (`openApiDocument()`) describes every answer; removed from `@fenced/gateway` in 0.3.0. */
export type BackendHealth = health.BackendHealth;
/** @deprecated A check of `HealthAnswer`; the OpenAPI document (`openApiDocument()`) describes every answer; removed from `@fenced/gateway` in 0.3.0. */
export type RedisHealth = health.RedisHealth;
/** @deprecated The OpenAPI document (`openApiDocument()`) describes every answer; removed from `@fenced/gateway` in 0.3.0. */
export type HealthAnswer = answers.HealthAnswer;
/** @deprecated The OpenAPI document (`openApiDocument()`) describes every answer; removed from `@fenced/gateway` in 0.3.0. */
export type LeaseAnswer = answers.LeaseAnswer;
/** @deprecated The OpenAPI document (`openApiDocument()`) describes every answer; removed from `@fenced/gateway` in 0.3.0. */
export type WriteAnswer = answers.WriteAnswer;
/** @deprecated `Awaited<ReturnType<Gateway["health"]>>` names it; removed from `@fenced/gateway` in 0.3.0. */
export type HealthReport = app.HealthReport;
/** @deprecated `Gateway["metrics"]` names it; removed from `@fenced/gateway` in 0.3.0. */
export type GatewayMetrics = metrics.GatewayMetrics;
/** @deprecated `NonNullable<GatewayOptions["leases"]>` names it; removed from `@fenced/gateway` in 0.3.0. */
export type LeaseBackendOptions = leases.LeaseBackendOptions;
/** @deprecated `ReturnType<typeof openApiDocument>` names it; removed from `@fenced/gateway` in 0.3.0. */
export type OpenApiDocument = openapi.OpenApiDocument;
/** @deprecated `Parameters<typeof openApiDocument>[0]` names it; removed from `@fenced/gateway` in 0.3.0. */
export type DocumentLimits = openapi.DocumentLimits;
/** @deprecated The OpenAPI document (`openApiDocument()`) describes every answer; removed from `@fenced/gateway` in 0.3.0. */
export type ProblemBody = problem.ProblemBody;
/** @deprecated `keyof typeof PROBLEM_TYPES` names it; removed from `@fenced/gateway` in 0.3.0. */
export type ProblemKind = kinds.ProblemKind;
