import type { z } from "zod";
import type { limitsSchema } from "../routes/context.js";

// The OpenAPI 3.1 objects the document is made of, as far as the gateway's document uses them.

export type JsonSchema = Record<string, unknown>;
export type Reference = { readonly $ref: string };
export interface HeaderObject {
  readonly description?: string;
  readonly required?: boolean;
  readonly schema: JsonSchema;
}
export interface MediaTypeObject {
  readonly schema?: JsonSchema;
}
export interface ResponseObject {
  readonly description: string;
  readonly headers?: Readonly<Record<string, HeaderObject | Reference>>;
  readonly content?: Readonly<Record<string, MediaTypeObject>>;
}
/** A request body. The lease bodies are components.requestBodies, each with its schema inline (components.ts). */
export interface RequestBodyObject {
  readonly description?: string;
  readonly required?: boolean;
  readonly content: Readonly<Record<string, MediaTypeObject>>;
}
export interface ParameterObject {
  readonly name: string;
  readonly in: "path" | "header" | "query" | "cookie";
  readonly description?: string;
  readonly required?: boolean;
  readonly schema: JsonSchema;
}
export interface OperationObject {
  readonly operationId: string;
  readonly summary: string;
  readonly description?: string;
  readonly tags: readonly string[];
  readonly security?: readonly Record<string, readonly string[]>[];
  readonly parameters?: readonly (ParameterObject | Reference)[];
  readonly requestBody?: RequestBodyObject | Reference;
  readonly responses: Readonly<Record<string, ResponseObject | Reference>>;
}
export const HTTP_METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"] as const;
export type HttpMethod = (typeof HTTP_METHODS)[number];
export type PathItemObject = { readonly parameters?: readonly (ParameterObject | Reference)[] } & {
  readonly [M in HttpMethod]?: OperationObject;
};

export interface OpenApiDocument {
  readonly openapi: "3.1.0";
  readonly jsonSchemaDialect: string;
  readonly info: {
    readonly title: string;
    readonly version: string;
    readonly description: string;
    readonly license: { readonly name: string; readonly identifier: string };
  };
  readonly tags: readonly { readonly name: string; readonly description: string }[];
  readonly servers: readonly { readonly url: string; readonly description: string }[];
  readonly security: readonly Record<string, readonly string[]>[];
  readonly paths: Readonly<Record<string, PathItemObject>>;
  readonly components: {
    readonly securitySchemes: Readonly<Record<string, unknown>>;
    readonly schemas: Readonly<Record<string, JsonSchema>>;
    readonly requestBodies: Readonly<Record<string, RequestBodyObject>>;
    readonly parameters: Readonly<Record<string, ParameterObject>>;
    readonly headers: Readonly<Record<string, HeaderObject>>;
    readonly responses: Readonly<Record<string, ResponseObject>>;
  };
}

/** The limits the document states (GatewayOptions.limits; defaults when omitted). */
export type DocumentLimits = Partial<Pick<z.input<typeof limitsSchema>, "recordBytes" | "objectBytes" | "maxTtlMs">>;

export type ResolvedLimits = z.output<typeof limitsSchema>;
