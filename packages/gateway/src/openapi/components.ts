import { FAMILY_VERSIONS } from "../stores/registration.js";
import { z } from "zod";
import { HOLDER_PATTERN } from "@fenced/fence/internal";
import {
  healthReportSchema,
  leaseAnswerSchema,
  livenessSchema,
  objectWriteAnswerSchema,
  recordWriteAnswerSchema,
} from "../schemas/answers.js";
import { OBJECT_VERSION } from "@fenced/store/internal";
import { credentialString, tokenString, unanchored } from "../vocabulary/fields.js";
import { PROBLEM_KINDS, PROBLEM_TYPES, problemSchema, type ProblemDefinition, type ProblemKind } from "../problems/kinds.js";
import { leaseBodySchema } from "../schemas/validation.js";
import { recordWritesAnswerSchema, recordWritesSchema } from "../schemas/record-writes.js";
import type {
  HeaderObject,
  JsonSchema,
  MediaTypeObject,
  OperationObject,
  ParameterObject,
  Reference,
  RequestBodyObject,
  ResolvedLimits,
  ResponseObject,
} from "./types.js";

// The document's building blocks (a zod schema as JSON Schema, references, the problem responses of
// an operation) and its components (parameters, headers, schemas, requestBodies), which paths.ts
// refers to. Requests are described by zod's input side (parameters, requestBodies), answers by its
// output side (headers, schemas); JsonValue and JsonObject, a record's value, are the same both ways.

/**
 * Which side of the wire a schema describes. A request's schema is zod's input ("input": a field
 * with a default may be left out); an answer's is its output ("output": what the gateway sends).
 */
export type Side = "input" | "output";

/** A zod schema as a draft 2020-12 JSON Schema (OpenAPI 3.1's dialect), for one side of the wire. */
export function jsonSchema(schema: z.ZodType, io: Side): JsonSchema {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, { target: "draft-2020-12", io, unrepresentable: "throw" });
  // Each component must stand alone: a $defs reference (or a recursive schema's "#") would point into
  // the wrong document once embedded. A reference to one of the document's components, which a schema
  // asks for in its metadata (a record's value: JsonValue), resolves wherever it is embedded.
  const text = JSON.stringify(rest);
  if (/"\$defs"/.test(text) || /"\$ref":"(?!#\/components\/)/.test(text))
    throw new Error("a component schema with references cannot be embedded");
  return rest;
}

const JSON_SCALARS: readonly JsonSchema[] = [{ type: "null" }, { type: "boolean" }, { type: "number" }, { type: "string" }];

/**
 * A record's value, the same both ways (PUT's body, GET's answer): any JSON value. Written out, not
 * from zod: the store checks a record's value (its own assertJsonValue), and the shape matters
 * to generated clients. A JSON Schema says "any JSON value" in one recursive schema, but
 * openapi-typescript turns an array of itself into `components["schemas"]["JsonValue"][]` inside an
 * interface, which TypeScript refuses (TS2502: referenced in its own type annotation; a recursion
 * through an object's properties is fine). So an array's items are a scalar, a JsonObject or an array
 * of anything: every JSON value still matches, and a client gets JSON types down to arrays in arrays.
 */
function jsonValueSchemas(): Record<string, JsonSchema> {
  return {
    JsonValue: {
      description:
        "Any JSON value: null, a boolean, a number, a string, an array, or an object of JSON values. A number is kept as a double, which holds every integer up to ±9007199254740991 and any 15 significant digits: a number its double would write back as another (9007199254740993, 0.1234567890123456789, 1e-400) is refused with 400; send such a number as a string",
      anyOf: [
        ...JSON_SCALARS,
        // The inner array's items: {} (any JSON value), which every linter reads as an array of anything.
        { type: "array", items: { anyOf: [...JSON_SCALARS, { type: "array", items: {} }, ref("schemas", "JsonObject")] } },
        ref("schemas", "JsonObject"),
      ],
    },
    JsonObject: { description: "A JSON object", type: "object", additionalProperties: ref("schemas", "JsonValue") },
  };
}

export const ref = (section: string, name: string): Reference => ({ $ref: `#/components/${section}/${name}` });
export const problemName = (kind: ProblemKind): string =>
  `${PROBLEM_TYPES[kind].type
    .replace("/problems/", "")
    .split("-")
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1))
    .join("")}Problem`;
const quoted = (version: RegExp): string => `^"(?:${unanchored(version)})"$`;

export const PROBLEM_JSON = "application/problem+json";

const retries = (kind: ProblemKind): boolean => (PROBLEM_TYPES[kind] as ProblemDefinition).retryAfter !== undefined;

/**
 * Whether an operation's answers carry a body: a HEAD answer never does (RFC 9110 §9.3.2), so its
 * responses declare headers only, or a validating proxy would expect a body the gateway never sends.
 */
export type Bodies = "with-body" | "headers-only";

/** One response per status for a route's problems: the types it can answer with, as a oneOf on `type`. */
export function problemResponses(kinds: readonly ProblemKind[], bodies: Bodies = "with-body"): Record<string, ResponseObject | Reference> {
  const byStatus = new Map<number, ProblemKind[]>();
  for (const kind of kinds) byStatus.set(PROBLEM_TYPES[kind].status, [...(byStatus.get(PROBLEM_TYPES[kind].status) ?? []), kind]);
  const responses: Record<string, ResponseObject | Reference> = {};
  for (const [status, group] of [...byStatus].sort(([a], [b]) => a - b)) {
    // Not found alone (the only 404 kind): the one shared answer, which also answers a path the document does not list.
    responses[String(status)] =
      bodies === "with-body" && group.length === 1 && group.includes("notFound")
        ? ref("responses", "NotFound")
        : problemResponse(status, group, bodies);
  }
  return responses;
}

/** The answer of a status whose problems are `group`: their descriptions, headers and (unless headers-only) the oneOf of their schemas. */
function problemResponse(status: number, group: readonly ProblemKind[], bodies: Bodies): ResponseObject {
  const refs = group.map((k) => ref("schemas", problemName(k)));
  const headers: Record<string, Reference> = {
    ...(status === 401 && { "WWW-Authenticate": ref("headers", "WWW-Authenticate") }),
    // From the table: required where every kind of the status carries it, described per kind where only some do.
    ...(group.every(retries) && { "Retry-After": ref("headers", "Retry-After") }),
    ...(group.some(retries) && !group.every(retries) && { "Retry-After": ref("headers", "Retry-After-Some") }),
  };
  return {
    description: group.map((k) => `\`${PROBLEM_TYPES[k].type}\`: ${PROBLEM_TYPES[k].description}`).join("\n\n"),
    ...(Object.keys(headers).length > 0 && { headers }),
    ...(bodies === "with-body" && {
      content: { [PROBLEM_JSON]: { schema: refs.length === 1 ? (refs[0] as Reference) : { oneOf: refs } } },
    }),
  };
}

/** components.responses.NotFound: every operation's 404, and the answer to a path the document does not list. */
export const notFoundResponse = (): ResponseObject => problemResponse(PROBLEM_TYPES.notFound.status, ["notFound"], "with-body");

// Every authenticated route can answer these: no or a bad API key, a backend that is not configured
// on this gateway (404), a backend that does not answer (503), a failure of the gateway itself.
const ALWAYS: readonly ProblemKind[] = ["unauthorized", "notFound", "unavailable", "internal"];
export const JSON_BODY: readonly ProblemKind[] = ["invalid", "tooLarge", "mediaType"];
// A route that calls a store: the backend may not be set up for it, or hold state the store did not write;
// and admission control may refuse it under overload (every route but a lease's extension and release).
export const STORE: readonly ProblemKind[] = ["backendMisconfigured", "corruptState", "backendError", "overloaded"];
// A store write (a put, a delete, a lease's registration) may have been applied with its answer lost.
export const STORE_WRITE: readonly ProblemKind[] = [...STORE, "outcomeUnknown"];
export const WRITE: readonly ProblemKind[] = [
  ...STORE_WRITE,
  "invalid",
  "forbidden",
  "credentialRequired",
  "invalidCredential",
  "credentialExpired",
  "stale",
  "resourceMismatch",
  "version",
];

export function operation(
  op: Omit<OperationObject, "responses">,
  success: Record<string, ResponseObject | Reference>,
  problems: readonly ProblemKind[],
  bodies: Bodies = "with-body",
): OperationObject {
  // A kind listed twice (shared lists) is one problem: the oneOf must not hold it twice.
  return { ...op, responses: { ...success, ...problemResponses([...new Set([...problems, ...ALWAYS])], bodies) } };
}

export const json = (schema: JsonSchema | Reference): Record<string, MediaTypeObject> => ({ "application/json": { schema } });

/** How a key or a resource travels in the path: the form this document describes, and the one the gateway also takes. */
export const ONE_SEGMENT =
  "`/` travels as `%2F`, as OpenAPI clients and proxies send a path parameter (`encodeURIComponent`); the value is " +
  "percent-decoded once (`%252F` is a literal `%2F`). The gateway also takes the slashes unencoded, the rest of the path " +
  "spanning segments: `a/b` and `a%2Fb` name the same key (earlier versions of this document described that form). This " +
  "document describes the one-segment form, the one OpenAPI tools match a path template against.";

export function parameters(): Record<string, ParameterObject> {
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
        `The key, percent-encoded as UTF-8 into one path segment. ${ONE_SEGMENT} ` +
        "At most 512 bytes once decoded; `.`/`..` segments, empty segments and control characters are refused (400).",
      schema: { type: "string", minLength: 1 },
    },
    "Fencing-Credential": {
      name: "Fencing-Credential",
      in: "header",
      description:
        "The `fence` of the lease answer: the whole fence of the write (resource, token, holder) and its lease's end, judged when the route takes the request, before its body is read (403 `credential-expired` after it). " +
        "Required unless the API key is a trusted lock client; not allowed together with Fencing-Token, Fencing-Resource or Fencing-Holder.",
      schema: jsonSchema(credentialString, "input"),
    },
    "Fencing-Token": {
      name: "Fencing-Token",
      in: "header",
      description: "Trusted lock clients only (without Fencing-Credential, and then required): the lease's token, a decimal string.",
      schema: jsonSchema(tokenString, "input"),
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
      description:
        "Trusted lock clients only: the lease's public holder id, so that the stores accept an equal token only from this lease.",
      schema: { type: "string", pattern: HOLDER_PATTERN.source },
    },
    "If-Match-Record": ifMatch(FAMILY_VERSIONS.records, "record"),
    "If-Match-Object": ifMatch(OBJECT_VERSION, "object"),
  };
}

export function headers(): Record<string, HeaderObject> {
  return {
    "ETag-Record": {
      description: "The record's version, quoted",
      required: true,
      schema: { type: "string", pattern: quoted(FAMILY_VERSIONS.records) },
    },
    "ETag-Object": {
      description: "The object's version, quoted",
      required: true,
      schema: { type: "string", pattern: quoted(OBJECT_VERSION) },
    },
    "Fencing-Token": {
      description: "The token that wrote this version (a decimal string)",
      required: true,
      schema: jsonSchema(tokenString, "output"),
    },
    "Fencing-Resource": {
      description: "The resource whose fence wrote this version, percent-encoded UTF-8",
      required: true,
      schema: { type: "string", minLength: 1 },
    },
    "Fencing-Holder": {
      description: "The holder of the lease that wrote this version; absent when its fence had no holder",
      schema: { type: "string", minLength: 1 },
    },
    "Content-Length": { description: "The object's size in bytes, when known", schema: { type: "string", pattern: "^(0|[1-9][0-9]*)$" } },
    "Retry-After": { description: "Seconds to wait before trying again", required: true, schema: { type: "string", pattern: "^[0-9]+$" } },
    "Retry-After-Some": {
      description: `Seconds to wait before trying again: sent with ${PROBLEM_KINDS.filter(retries)
        .map((k) => `\`${PROBLEM_TYPES[k].type}\``)
        .join(", ")}`,
      schema: { type: "string", pattern: "^[0-9]+$" },
    },
    "WWW-Authenticate": { description: "The Bearer challenge", required: true, schema: { type: "string", pattern: "^Bearer " } },
    Allow: { description: "The methods the route serves", required: true, schema: { type: "string", minLength: 1 } },
  };
}

/**
 * The schemas of the answers (zod's output side), and JsonValue, a record's value both ways. The
 * request bodies are not here but in requestBodies(): see there.
 */
export function schemas(): Record<string, JsonSchema> {
  return {
    LeaseAnswer: jsonSchema(leaseAnswerSchema, "output"),
    RecordWriteAnswer: jsonSchema(recordWriteAnswerSchema, "output"),
    ObjectWriteAnswer: jsonSchema(objectWriteAnswerSchema, "output"),
    RecordWritesAnswer: jsonSchema(recordWritesAnswerSchema, "output"),
    HealthReport: jsonSchema(healthReportSchema, "output"),
    Liveness: jsonSchema(livenessSchema, "output"),
    ...jsonValueSchemas(),
    ...Object.fromEntries(PROBLEM_KINDS.map((kind) => [problemName(kind), jsonSchema(problemSchema(kind), "output")])),
  };
}

/**
 * The lease request bodies, each with its input schema inline (zod's input side: `register`, which
 * has a default, may be left out). Inline rather than a $ref to components.schemas: client
 * generators read a property with a default in a schema component as always present, which is true
 * of answers only (openapi-typescript's defaultNonNullable, on by default, exempts schemas under
 * requestBodies and requestBody), so `{ resource, ttlMs }` would not type-check.
 */
export function requestBodies(limits: ResolvedLimits): Record<string, RequestBodyObject> {
  const bodies = leaseBodySchema(limits.maxTtlMs);
  const body = (schema: z.ZodType, description: string): RequestBodyObject => ({
    required: true,
    description,
    content: json(jsonSchema(schema, "input")),
  });
  return {
    LeaseCreateRequest: body(
      bodies.create,
      "The resource (or `resources`, several taken together), the TTL in milliseconds, and whether to register the fences with the stores",
    ),
    LeaseExtendRequest: body(bodies.extend, "The lease id from the lease answer and the new TTL"),
    LeaseReleaseRequest: body(bodies.release, "The lease id from the lease answer"),
    RecordWritesRequest: body(
      recordWritesSchema,
      `The credentials the writes are under (\`fences\`) and the records (\`writes\`, each naming its resource), the whole body at most ${limits.recordBytes} bytes`,
    ),
  };
}
