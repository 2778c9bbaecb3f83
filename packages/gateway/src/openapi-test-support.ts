// Checks answers against the API document (not part of the published build): test-support.ts's
// httpClient runs every answer the gateway's tests receive through it.
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import { openApiDocument } from "./openapi/document.js";
import {
  HTTP_METHODS,
  type HeaderObject,
  type HttpMethod,
  type JsonSchema,
  type OpenApiDocument,
  type OperationObject,
  type Reference,
  type ResponseObject,
} from "./openapi/types.js";

/** One request and the answer it got, as the client saw them. */
export interface Exchange {
  readonly method: string;
  /** As sent: the query, if any, is not part of the route. */
  readonly path: string;
  readonly status: number;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly body: Buffer;
}

/** An answer the API document does not describe. */
export class ApiMismatchError extends Error {
  override readonly name = "ApiMismatchError";
  readonly code = "api-mismatch";
}

export type ExchangeCheck = (exchange: Exchange) => void;

// Schemas are compiled against one registered copy of components.schemas, under this id.
const COMPONENTS_ID = "urn:fenced-gateway:components";

const isReference = (value: unknown): value is Reference =>
  typeof value === "object" && value !== null && typeof (value as { $ref?: unknown }).$ref === "string";

/** Follows a local reference (#/components/…) inside the document; throws on a dangling one. */
export function resolve<T>(document: OpenApiDocument, value: T | Reference): T {
  if (!isReference(value)) return value;
  if (!value.$ref.startsWith("#/")) throw new ApiMismatchError(`the document has a non-local reference ${value.$ref}`);
  let node: unknown = document;
  for (const part of value.$ref.slice(2).split("/")) {
    node =
      typeof node === "object" && node !== null
        ? (node as Record<string, unknown>)[part.replace(/~1/g, "/").replace(/~0/g, "~")]
        : undefined;
    if (node === undefined) throw new ApiMismatchError(`the document's reference ${value.$ref} leads nowhere`);
  }
  return resolve(document, node as T | Reference);
}

/** A schema with its references to #/components/schemas/X pointed at the registered components. */
function rebased(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(rebased);
  if (typeof schema !== "object" || schema === null) return schema;
  return Object.fromEntries(
    Object.entries(schema).map(([k, v]) => [
      k,
      k === "$ref" && typeof v === "string" ? v.replace("#/components/schemas/", `${COMPONENTS_ID}#/$defs/`) : rebased(v),
    ]),
  );
}

/** Path templates as regular expressions. `{key}` spans segments (it may hold `/`); an empty key is the route's own 400. */
function templateMatcher(template: string): RegExp {
  const source = template
    .split(/(\{[^}]+\})/)
    .map((part) => (part.startsWith("{") ? "(.*)" : part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")))
    .join("");
  return new RegExp(`^${source}$`);
}

const mediaTypeOf = (contentType: string | string[] | undefined): string | undefined =>
  typeof contentType === "string" ? (contentType.split(";")[0] ?? "").trim().toLowerCase() : undefined;

function mediaMatches(documented: string, actual: string): boolean {
  if (documented === "*/*" || documented === actual) return true;
  return documented.endsWith("/*") && actual.startsWith(documented.slice(0, -1));
}

const isJson = (media: string): boolean => media === "application/json" || media.endsWith("+json");

/**
 * A checker for exchanges with a gateway: finds the operation (method and path template), requires
 * the status to be documented for it, the documented required headers to be there and match their
 * schemas, the Content-Type to be a documented media type, and a JSON body to match its schema
 * (ajv, draft 2020-12). A method the path does not list must answer 405 (with Allow) or 404, and a
 * path the document does not list 404, each as described in components.responses.
 */
export function exchangeChecker(document: OpenApiDocument = openApiDocument()): ExchangeCheck {
  const ajv = new Ajv2020({ allErrors: true, strict: true, validateFormats: false });
  ajv.addSchema({ $id: COMPONENTS_ID, $defs: rebased(document.components.schemas) as Record<string, JsonSchema> });
  const compiled = new Map<JsonSchema, ValidateFunction>();
  const validator = (schema: JsonSchema): ValidateFunction => {
    let validate = compiled.get(schema);
    if (validate === undefined) {
      validate = ajv.compile(rebased(schema) as JsonSchema);
      compiled.set(schema, validate);
    }
    return validate;
  };
  const routes = Object.entries(document.paths).map(([template, item]) => ({ template, item, matcher: templateMatcher(template) }));

  return (exchange) => {
    const path = exchange.path.split("?")[0] ?? "";
    const method = exchange.method.toLowerCase();
    const where = `${exchange.method} ${path.length > 120 ? `${path.slice(0, 120)}…` : path} → ${exchange.status}`;
    const fail = (why: string): never => {
      const body = exchange.body.toString("utf8");
      throw new ApiMismatchError(
        `the API document does not describe this answer: ${where}: ${why}${body === "" ? "" : `\nbody: ${body.slice(0, 500)}`}`,
      );
    };
    const route = routes.find((r) => r.matcher.test(path));
    let response: ResponseObject;
    let bodyExpected = method !== "head";
    if (route === undefined) {
      if (exchange.status !== 404) fail("a path the document does not list must answer 404");
      response = resolve(document, document.components.responses.NotFound as ResponseObject);
    } else {
      // HEAD is GET without a body (RFC 9110) where the document lists no HEAD of its own.
      const op: OperationObject | undefined = HTTP_METHODS.includes(method as HttpMethod)
        ? (route.item[method as HttpMethod] ?? (method === "head" ? route.item.get : undefined))
        : undefined;
      if (op === undefined) {
        if (exchange.status !== 404 && exchange.status !== 405)
          fail(`${route.template} does not list ${exchange.method}: expected 405 or 404`);
        response = resolve(
          document,
          exchange.status === 405
            ? (document.components.responses.MethodNotAllowed as ResponseObject)
            : (document.components.responses.NotFound as ResponseObject),
        );
      } else {
        const documented =
          op.responses[String(exchange.status)] ?? op.responses[`${String(exchange.status).charAt(0)}XX`] ?? op.responses.default;
        if (documented === undefined)
          fail(`status ${exchange.status} is not documented for ${op.operationId} (documented: ${Object.keys(op.responses).join(", ")})`);
        response = resolve(document, documented as ResponseObject | Reference);
      }
    }
    if (exchange.status === 204 || exchange.status === 304) bodyExpected = false;

    for (const [name, declared] of Object.entries(response.headers ?? {})) {
      const header = resolve<HeaderObject>(document, declared);
      const value = exchange.headers[name.toLowerCase()];
      if (value === undefined) {
        if (header.required === true) fail(`header ${name} is required`);
        continue;
      }
      if (Array.isArray(value)) fail(`header ${name} is repeated`);
      const validate = validator(header.schema);
      if (!validate(value)) fail(`header ${name}: ${JSON.stringify(value)} ${ajv.errorsText(validate.errors)}`);
    }

    if (response.content === undefined) {
      if (exchange.body.length > 0) fail("no body is documented for this answer");
      return;
    }
    const media = mediaTypeOf(exchange.headers["content-type"]);
    if (media === undefined) {
      fail(`Content-Type is missing (documented: ${Object.keys(response.content).join(", ")})`);
      return;
    }
    const entry = Object.entries(response.content).find(([documented]) => mediaMatches(documented, media));
    if (entry === undefined) fail(`Content-Type ${media} is not documented (documented: ${Object.keys(response.content).join(", ")})`);
    if (!bodyExpected) return;
    const schema = entry?.[1].schema;
    if (schema === undefined || !isJson(media)) return;
    let body: unknown;
    try {
      body = JSON.parse(exchange.body.toString("utf8"));
    } catch {
      fail(`the body is not JSON, as ${media} says`);
    }
    const validate = validator(schema);
    if (!validate(body)) fail(`the body does not match the documented schema: ${ajv.errorsText(validate.errors, { separator: "; " })}`);
  };
}
