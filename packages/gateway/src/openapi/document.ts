import { z } from "zod";
import { HOLDER_PATTERN } from "@fenced/fence";
import { healthReportSchema, leaseAnswerSchema, objectWriteAnswerSchema, recordWriteAnswerSchema } from "../schemas/answers.js";
import { credentialString, OBJECT_VERSION, RECORD_VERSION, tokenString, unanchored } from "../schemas/fields.js";
import { limitsSchema } from "../http/context.js";
import { PROBLEM_KINDS, PROBLEM_TYPES, problemSchema, type ProblemKind } from "../problems/kinds.js";
import { leaseBodySchema } from "../schemas/validation.js";

/**
 * The gateway's OpenAPI 3.1 document, generated from the zod schemas that validate its requests
 * (schemas/validation.ts) and type its answers (schemas/answers.ts). Served at GET /openapi.json and shipped as
 * @fenced/gateway/openapi.json; the gateway's tests check every answer they receive against it.
 */

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
  readonly requestBody?: { readonly description?: string; readonly required?: boolean; readonly content: Readonly<Record<string, MediaTypeObject>> };
  readonly responses: Readonly<Record<string, ResponseObject | Reference>>;
}
export const HTTP_METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"] as const;
export type HttpMethod = (typeof HTTP_METHODS)[number];
export type PathItemObject = { readonly parameters?: readonly (ParameterObject | Reference)[] } & { readonly [M in HttpMethod]?: OperationObject };

export interface OpenApiDocument {
  readonly openapi: "3.1.0";
  readonly jsonSchemaDialect: string;
  readonly info: { readonly title: string; readonly version: string; readonly description: string; readonly license: { readonly name: string; readonly identifier: string } };
  readonly tags: readonly { readonly name: string; readonly description: string }[];
  readonly security: readonly Record<string, readonly string[]>[];
  readonly paths: Readonly<Record<string, PathItemObject>>;
  readonly components: {
    readonly securitySchemes: Readonly<Record<string, unknown>>;
    readonly schemas: Readonly<Record<string, JsonSchema>>;
    readonly parameters: Readonly<Record<string, ParameterObject>>;
    readonly headers: Readonly<Record<string, HeaderObject>>;
    readonly responses: Readonly<Record<string, ResponseObject>>;
  };
}

/** The limits the document states (GatewayOptions.limits; defaults when omitted). */
export type DocumentLimits = Partial<Pick<z.input<typeof limitsSchema>, "recordBytes" | "objectBytes" | "maxTtlMs">>;

type ResolvedLimits = z.output<typeof limitsSchema>;

/** A zod schema as a draft 2020-12 JSON Schema (OpenAPI 3.1's dialect), as the wire sees it (its input side). */
function jsonSchema(schema: z.ZodType): JsonSchema {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, { target: "draft-2020-12", io: "input", unrepresentable: "throw" });
  // Each component must stand alone: a $defs reference would point into the wrong document once embedded.
  if (JSON.stringify(rest).includes('"$defs"')) throw new Error("a component schema with $defs cannot be embedded");
  return rest;
}

const ref = (section: string, name: string): Reference => ({ $ref: `#/components/${section}/${name}` });
const problemName = (kind: ProblemKind): string =>
  `${PROBLEM_TYPES[kind].type
    .replace("/problems/", "")
    .split("-")
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1))
    .join("")}Problem`;
const quoted = (version: RegExp): string => `^"(?:${unanchored(version)})"$`;

const PROBLEM_JSON = "application/problem+json";

/** One response per status for a route's problems: the types it can answer with, as a oneOf on `type`. */
function problemResponses(kinds: readonly ProblemKind[]): Record<string, ResponseObject> {
  const byStatus = new Map<number, ProblemKind[]>();
  for (const kind of kinds) byStatus.set(PROBLEM_TYPES[kind].status, [...(byStatus.get(PROBLEM_TYPES[kind].status) ?? []), kind]);
  const responses: Record<string, ResponseObject> = {};
  for (const [status, group] of [...byStatus].sort(([a], [b]) => a - b)) {
    const refs = group.map((k) => ref("schemas", problemName(k)));
    const headers: Record<string, Reference> = {
      ...(status === 401 && { "WWW-Authenticate": ref("headers", "WWW-Authenticate") }),
      ...(status === 503 && { "Retry-After": ref("headers", "Retry-After") }),
      ...(group.includes("lockHeld") && { "Retry-After": ref("headers", "Retry-After-Lock") }),
    };
    responses[String(status)] = {
      description: group.map((k) => `\`${PROBLEM_TYPES[k].type}\`: ${PROBLEM_TYPES[k].description}`).join("\n\n"),
      ...(Object.keys(headers).length > 0 && { headers }),
      content: { [PROBLEM_JSON]: { schema: refs.length === 1 ? (refs[0] as Reference) : { oneOf: refs } } },
    };
  }
  return responses;
}

// Every authenticated route can answer these: no or a bad API key, a backend that is not configured
// on this gateway (404), a backend that does not answer (503), a failure of the gateway itself.
const ALWAYS: readonly ProblemKind[] = ["unauthorized", "notFound", "unavailable", "internal"];
const JSON_BODY: readonly ProblemKind[] = ["invalid", "tooLarge", "mediaType"];
const WRITE: readonly ProblemKind[] = ["invalid", "forbidden", "credentialRequired", "invalidCredential", "credentialExpired", "stale", "resourceMismatch", "version"];

function operation(op: Omit<OperationObject, "responses">, success: Record<string, ResponseObject | Reference>, problems: readonly ProblemKind[]): OperationObject {
  // A kind listed twice (shared lists) is one problem: the oneOf must not hold it twice.
  return { ...op, responses: { ...success, ...problemResponses([...new Set([...problems, ...ALWAYS])]) } };
}

const json = (schema: JsonSchema | Reference): Record<string, MediaTypeObject> => ({ "application/json": { schema } });

function leasePaths(): Record<string, PathItemObject> {
  const body = (name: string, description: string) => ({ required: true, description, content: json(ref("schemas", name)) });
  const lease = (description: string): ResponseObject => ({ description, content: json(ref("schemas", "LeaseAnswer")) });
  return {
    "/v1/leases": {
      post: operation(
        {
          operationId: "createLease",
          summary: "Take a lease (Redlock over the configured nodes)",
          description:
            "Never waits for a held lock: 409 `lock-held` with Retry-After, and the client decides when to try again. " +
            "With `register: true` the lease's fence is registered with every store of this gateway before it is answered " +
            "(fence-on-acquire): every older holder is refused from then on, also on keys this lease never writes; a store " +
            "that has seen a higher token refuses (409 `stale-token`) and the lease is released. Bodies up to 16 KiB.",
          tags: ["leases"],
          requestBody: body("LeaseCreateRequest", "The resource, the TTL in milliseconds, and whether to register the fence with the stores"),
        },
        { "201": lease("The lease; `fence` is the credential every write of this lease presents") },
        [...JSON_BODY, "forbidden", "lockHeld", "tokenSpaceExhausted", "stale", "leaseLost"],
      ),
    },
    "/v1/leases/extend": {
      post: operation(
        {
          operationId: "extendLease",
          summary: "Extend a lease",
          description:
            "The lease id travels in the body, never in a path. The token, holder and resource come from the lease id, which the gateway " +
            "sealed: an edited id is refused (403 `invalid-lease-id`) and earns no credential. An id past its validUntil is refused as " +
            "`lease-lost` (`expired`) without asking the lock. The answer carries a new validUntil, a new credential good until then and " +
            "a new lease id: use them from now on.",
          tags: ["leases"],
          requestBody: body("LeaseExtendRequest", "The lease id from the lease answer and the new TTL"),
        },
        { "200": lease("The extended lease") },
        [...JSON_BODY, "forbidden", "invalidLeaseId", "leaseLost"],
      ),
    },
    "/v1/leases/release": {
      post: operation(
        {
          operationId: "releaseLease",
          summary: "Release a lease",
          description:
            "Idempotent: releases the lock only where it still holds this lease; a stale id releases nothing. An id this gateway did not " +
            "seal is refused (403 `invalid-lease-id`). The lease's credential is refused from its validUntil on, released or not.",
          tags: ["leases"],
          requestBody: body("LeaseReleaseRequest", "The lease id from the lease answer"),
        },
        { "204": { description: "Released (or no longer held)" } },
        [...JSON_BODY, "forbidden", "invalidLeaseId"],
      ),
    },
  };
}

type Store = "records" | "objects";

function keyPaths(store: Store, limits: ResolvedLimits): PathItemObject {
  const noun = store === "records" ? "record" : "object";
  const Noun = store === "records" ? "Record" : "Object";
  const etag = ref("headers", `ETag-${Noun}`);
  const token = ref("headers", "Fencing-Token");
  const resource = ref("headers", "Fencing-Resource");
  const readHeaders = { ETag: etag, "Fencing-Token": token, "Fencing-Resource": resource, ...(store === "objects" && { "Content-Length": ref("headers", "Content-Length") }) };
  const readContent: Record<string, MediaTypeObject> =
    store === "records" ? json({ description: "The record's JSON value, as written" }) : { "*/*": { schema: { description: "The object's bytes, with the Content-Type they were written with" } } };
  const read = (method: "get" | "head"): OperationObject =>
    operation(
      {
        operationId: `${method}${Noun}`,
        summary: method === "get" ? `Read a${store === "objects" ? "n" : ""} ${noun}` : `The headers of a ${noun} read, without its body`,
        tags: [store],
        ...(store === "objects" && method === "get" && { description: "Streamed from S3 with backpressure." }),
      },
      {
        "200": {
          description: `The ${noun}: ETag is its version (for If-Match), Fencing-Token and Fencing-Resource the fence that wrote it`,
          headers: readHeaders,
          ...(method === "get" && { content: readContent }),
        },
      },
      ["invalid", "forbidden"],
    );
  const writeParameters = [ref("parameters", "Fencing-Credential"), ref("parameters", "Fencing-Token"), ref("parameters", "Fencing-Resource"), ref("parameters", "Fencing-Holder"), ref("parameters", `If-Match-${Noun}`)];
  const bodyLimit = store === "records" ? limits.recordBytes : limits.objectBytes;
  const putBody =
    store === "records"
      ? { required: true, description: `Any JSON value, at most ${bodyLimit} bytes`, content: json({ description: "The record's new value" }) }
      : {
          description:
            `The object's bytes (any media type, stored and served back as sent; default application/octet-stream), at most ${bodyLimit} bytes. ` +
            "No Content-Encoding. With `Expect: 100-continue` the gateway answers a refused write before the body is sent.",
          content: { "*/*": { schema: { description: "The object's bytes" } } },
        };
  const guarantee =
    "The fence is the Fencing-Credential of a lease (POST /v1/leases); only an API key configured as a trusted lock client may send " +
    "Fencing-Token, Fencing-Resource and Fencing-Holder instead. The storage refuses a token lower than the highest it accepted for the " +
    "resource (409 `stale-token`) and changes nothing. If-Match makes the write a compare-and-set on the version a read returned " +
    "(412 `version-mismatch`); If-None-Match, If-Unmodified-Since and If-Modified-Since are refused (400).";
  return {
    parameters: [ref("parameters", "Key")],
    get: read("get"),
    head: read("head"),
    put: operation(
      { operationId: `put${Noun}`, summary: `Write a${store === "objects" ? "n" : ""} ${noun} under a fence`, description: guarantee, tags: [store], parameters: writeParameters, requestBody: putBody },
      {
        "200": {
          description: `Accepted: the ${noun}'s new version (also as ETag) and the token that wrote it`,
          headers: { ETag: etag, "Fencing-Token": token },
          content: json(ref("schemas", `${Noun}WriteAnswer`)),
        },
      },
      [...WRITE, "tooLarge", "mediaType"],
    ),
    delete: operation(
      {
        operationId: `delete${Noun}`,
        summary: `Delete a${store === "objects" ? "n" : ""} ${noun} under a fence`,
        description: `${guarantee} A delete leaves a tombstone: the key's ratchet survives it.`,
        tags: [store],
        parameters: writeParameters,
      },
      { "204": { description: "Deleted", headers: store === "records" ? { "Fencing-Token": token } : { ETag: etag, "Fencing-Token": token } } },
      WRITE,
    ),
  };
}

function parameters(): Record<string, ParameterObject> {
  const ifMatch = (version: RegExp, what: string): ParameterObject => ({
    name: "If-Match",
    in: "header",
    description: `One entity tag: the ${what} version a read or write returned in ETag (quoted as there; a bare version is accepted too). \`*\` and lists are refused (400).`,
    schema: { type: "string", pattern: `^(?:"(?:${unanchored(version)})"|(?:${unanchored(version)}))$` },
  });
  return {
    Key: {
      name: "key",
      in: "path",
      required: true,
      description:
        "The key, `/` included: the rest of the path, one or more segments separated by `/` (this parameter, unlike an ordinary path " +
        "parameter, spans segments; send the slashes as they are). Percent-encode each segment as UTF-8; `%2F` and `/` are the same. " +
        "At most 512 bytes once decoded; `.`/`..` segments, empty segments and control characters are refused (400).",
      schema: { type: "string", minLength: 1 },
    },
    "Fencing-Credential": {
      name: "Fencing-Credential",
      in: "header",
      description:
        "The `fence` of the lease answer: the whole fence of the write (resource, token, holder) and its lease's end, judged when the request's headers arrive (403 `credential-expired` after it). " +
        "Required unless the API key is a trusted lock client; not allowed together with Fencing-Token, Fencing-Resource or Fencing-Holder.",
      schema: jsonSchema(credentialString),
    },
    "Fencing-Token": {
      name: "Fencing-Token",
      in: "header",
      description: "Trusted lock clients only (without Fencing-Credential, and then required): the lease's token, a decimal string.",
      schema: jsonSchema(tokenString),
    },
    "Fencing-Resource": {
      name: "Fencing-Resource",
      in: "header",
      description: "Trusted lock clients only: the lease's resource, percent-encoded UTF-8 (default: the key).",
      schema: { type: "string", minLength: 1 },
    },
    "Fencing-Holder": {
      name: "Fencing-Holder",
      in: "header",
      description: "Trusted lock clients only: the lease's public holder id, so that the stores accept an equal token only from this lease.",
      schema: { type: "string", pattern: HOLDER_PATTERN.source },
    },
    "If-Match-Record": ifMatch(RECORD_VERSION, "record"),
    "If-Match-Object": ifMatch(OBJECT_VERSION, "object"),
  };
}

function headers(): Record<string, HeaderObject> {
  return {
    "ETag-Record": { description: "The record's version, quoted", required: true, schema: { type: "string", pattern: quoted(RECORD_VERSION) } },
    "ETag-Object": { description: "The object's version, quoted", required: true, schema: { type: "string", pattern: quoted(OBJECT_VERSION) } },
    "Fencing-Token": { description: "The token that wrote this version (a decimal string)", required: true, schema: jsonSchema(tokenString) },
    "Fencing-Resource": { description: "The resource whose fence wrote this version, percent-encoded UTF-8", required: true, schema: { type: "string", minLength: 1 } },
    "Content-Length": { description: "The object's size in bytes, when known", schema: { type: "string", pattern: "^(0|[1-9][0-9]*)$" } },
    "Retry-After": { description: "Seconds to wait before trying again", required: true, schema: { type: "string", pattern: "^[0-9]+$" } },
    "Retry-After-Lock": { description: "With `lock-held`: seconds to wait before trying again", schema: { type: "string", pattern: "^[0-9]+$" } },
    "WWW-Authenticate": { description: "The Bearer challenge", required: true, schema: { type: "string", pattern: "^Bearer " } },
    Allow: { description: "The methods the route serves", required: true, schema: { type: "string", minLength: 1 } },
  };
}

function schemas(limits: ResolvedLimits): Record<string, JsonSchema> {
  const bodies = leaseBodySchema(limits.maxTtlMs);
  return {
    LeaseCreateRequest: jsonSchema(bodies.create),
    LeaseExtendRequest: jsonSchema(bodies.extend),
    LeaseReleaseRequest: jsonSchema(bodies.release),
    LeaseAnswer: jsonSchema(leaseAnswerSchema),
    RecordWriteAnswer: jsonSchema(recordWriteAnswerSchema),
    ObjectWriteAnswer: jsonSchema(objectWriteAnswerSchema),
    HealthReport: jsonSchema(healthReportSchema),
    ...Object.fromEntries(PROBLEM_KINDS.map((kind) => [problemName(kind), jsonSchema(problemSchema(kind))])),
  };
}

const PUBLIC: readonly Record<string, readonly string[]>[] = [];

function operationsPaths(): Record<string, PathItemObject> {
  return {
    "/healthz": {
      get: {
        operationId: "getHealth",
        summary: "One check per configured backend, each with a deadline",
        description: "Unauthenticated, for load balancers: expose it to your infrastructure only (an error may name a backend's address).",
        tags: ["operations"],
        security: PUBLIC,
        responses: {
          "200": { description: "Every backend answered (the lock: a quorum of nodes)", content: json(ref("schemas", "HealthReport")) },
          "503": { description: "A backend did not answer", content: json(ref("schemas", "HealthReport")) },
          ...problemResponses(["internal"]),
        },
      },
    },
    "/metrics": {
      get: {
        operationId: "getMetrics",
        summary: "Prometheus metrics (text format)",
        description: "Unauthenticated, for scrapers. No label holds a key, a resource or an API key id.",
        tags: ["operations"],
        security: PUBLIC,
        responses: { "200": { description: "The Prometheus text exposition format", content: { "text/plain": { schema: { type: "string" } } } }, ...problemResponses(["internal"]) },
      },
    },
    "/openapi.json": {
      get: {
        operationId: "getOpenApi",
        summary: "This document",
        description: "Unauthenticated. Its limits (TTL, body sizes) are this gateway's.",
        tags: ["operations"],
        security: PUBLIC,
        responses: { "200": { description: "The OpenAPI 3.1 document", content: json({ type: "object" }) }, ...problemResponses(["internal"]) },
      },
    },
  };
}

const DESCRIPTION = `Leases from a Redlock with fencing tokens, and writes to PostgreSQL records and S3 objects that the storage refuses when their token is stale.

Authenticate with \`Authorization: Bearer <API key>\`. Tokens travel as decimal strings, never JSON numbers (they are 64-bit).
A write presents the \`fence\` of its lease as \`Fencing-Credential\`; the storage orders writes by token and refuses a stale one
with 409 \`/problems/stale-token\`, changing nothing.

Every error is RFC 9457 \`application/problem+json\`; branch on \`type\`. A method a path does not list here answers 405
\`/problems/method-not-allowed\` (with Allow) on the /v1 routes and 404 elsewhere; a path not listed here answers 404
\`/problems/not-found\` (components.responses: MethodNotAllowed, NotFound).`;

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
    security: [{ bearer: [] }],
    paths: { ...leasePaths(), "/v1/records/{key}": keyPaths("records", limits), "/v1/objects/{key}": keyPaths("objects", limits), ...operationsPaths() },
    components: {
      securitySchemes: { bearer: { type: "http", scheme: "bearer", description: "An API key: 16-256 characters of A-Z a-z 0-9 . _ ~ + / -" } },
      schemas: schemas(limits),
      parameters: parameters(),
      headers: headers(),
      responses: {
        NotFound: { description: "A path this document does not list", content: { [PROBLEM_JSON]: { schema: ref("schemas", problemName("notFound")) } } },
        MethodNotAllowed: {
          description: "A method the path does not serve",
          headers: { Allow: ref("headers", "Allow") },
          content: { [PROBLEM_JSON]: { schema: ref("schemas", problemName("method")) } },
        },
      },
    },
  };
}
