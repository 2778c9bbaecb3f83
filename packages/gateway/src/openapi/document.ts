import { limitsSchema } from "../routes/context.js";
import { REQUEST_ID_HEADER, SANE_REQUEST_ID } from "../http/request-scope.js";
import { headers, notFoundResponse, parameters, PROBLEM_JSON, problemName, ref, requestBodies, schemas } from "./components.js";
import { keyPaths, leasePaths, operationsPaths, recordWritesPath } from "./paths.js";
import {
  HTTP_METHODS,
  type DocumentLimits,
  type HeaderObject,
  type OpenApiDocument,
  type PathItemObject,
  type Reference,
  type ResponseObject,
} from "./types.js";

/**
 * The gateway's OpenAPI 3.1 document, generated from the zod schemas that validate its requests
 * (schemas/validation.ts) and type its answers (schemas/answers.ts). Served at GET /openapi.json and shipped as
 * @fenced/gateway/openapi.json; the gateway's tests check every answer they receive against it.
 */

export type { DocumentLimits, OpenApiDocument } from "./types.js";

const DESCRIPTION = `Leases from a Redlock with fencing tokens, and writes to PostgreSQL records and S3 objects that the storage refuses when their token is stale.

Authenticate with \`Authorization: Bearer <API key>\`. Tokens travel as decimal strings, never JSON numbers (they are 64-bit).
A write presents the \`fence\` of its lease as \`Fencing-Credential\`; the storage orders writes by token and refuses a stale one
with 409 \`/problems/stale-token\`, changing nothing.

Every error is RFC 9457 \`application/problem+json\`; branch on \`type\`. A method a path does not list here answers 405
\`/problems/method-not-allowed\` (with Allow) on the /v1 routes and 404 elsewhere; a path not listed here answers 404
\`/problems/not-found\` (components.responses: MethodNotAllowed, NotFound).

Every answer carries \`X-Request-Id\`: the client's own when it sent a sane one (1-128 characters of
letters, digits and \`-_.:+/=@\`), else a new one. Problem bodies carry it as \`requestId\`, and each log line
and trace span of the request names it.`;

/** The document for a gateway with these limits (the defaults when omitted). */
export function openApiDocument(documentLimits: DocumentLimits = {}): OpenApiDocument {
  // Only the limits the document states: a gateway's Limits carry more (inlineBytes).
  const { recordBytes, objectBytes, maxTtlMs } = documentLimits;
  const limits = limitsSchema.parse({ recordBytes, objectBytes, maxTtlMs });
  return {
    openapi: "3.1.0",
    jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
    info: { title: "fenced gateway", version: "1", description: DESCRIPTION, license: { name: "MIT", identifier: "MIT" } },
    tags: [
      { name: "leases", description: "Leases (Redlock) with fencing tokens and signed fence credentials" },
      { name: "records", description: "JSON records in PostgreSQL, written under a fence" },
      { name: "objects", description: "Objects in S3, streamed both ways, written under a fence" },
      { name: "operations", description: "Health, metrics and this document (unauthenticated)" },
    ],
    // Relative: the gateway that served this document (GET /openapi.json), wherever it is reached.
    servers: [{ url: "/", description: "The gateway serving this document" }],
    security: [{ bearer: [] }],
    paths: withRequestIds({
      ...leasePaths(),
      "/v1/records": recordWritesPath(limits),
      "/v1/records/{key}": keyPaths("records", limits),
      "/v1/objects/{key}": keyPaths("objects", limits),
      ...operationsPaths(),
    }),
    components: {
      securitySchemes: {
        bearer: { type: "http", scheme: "bearer", description: "An API key: 16-256 characters of A-Z a-z 0-9 . _ ~ + / -" },
      },
      schemas: schemas(),
      requestBodies: requestBodies(limits),
      parameters: parameters(),
      headers: { ...headers(), [REQUEST_ID_HEADER]: REQUEST_ID },
      responses: {
        NotFound: withRequestId(notFoundResponse()),
        MethodNotAllowed: withRequestId({
          description: "A method the path does not serve",
          headers: { Allow: ref("headers", "Allow") },
          content: { [PROBLEM_JSON]: { schema: ref("schemas", problemName("method")) } },
        }),
      },
    },
  };
}

const REQUEST_ID: HeaderObject = {
  description: "The request's id: the client's X-Request-Id when it sent a sane one, else a new one",
  required: true,
  schema: { type: "string", pattern: SANE_REQUEST_ID.source },
};

/** A response with the X-Request-Id header every answer carries (a reference is left as it is: it names a component that has it). */
function withRequestId<R extends ResponseObject | Reference>(response: R): R {
  if ("$ref" in response) return response;
  return { ...response, headers: { ...response.headers, [REQUEST_ID_HEADER]: ref("headers", REQUEST_ID_HEADER) } };
}

function withRequestIds(paths: Record<string, PathItemObject>): Record<string, PathItemObject> {
  return Object.fromEntries(
    Object.entries(paths).map(([path, item]) => {
      const operations = HTTP_METHODS.flatMap((method) => {
        const op = item[method];
        if (op === undefined) return [];
        const responses = Object.fromEntries(Object.entries(op.responses).map(([status, r]) => [status, withRequestId(r)]));
        return [[method, { ...op, responses }]];
      });
      return [path, { ...item, ...Object.fromEntries(operations) }];
    }),
  );
}
