import { MAX_RESOURCES } from "@fenced/fence";
import { MAX_LEASE_RESOURCE_BYTES } from "../auth/lease-id.js";
import { MAX_RECORD_WRITES } from "../schemas/record-writes.js";
import { fenceAnswerSchema } from "../schemas/fences.js";
import { JSON_BODY, json, jsonSchema, ONE_SEGMENT, operation, problemResponses, ref, STORE, STORE_WRITE, WRITE } from "./components.js";
import type { MediaTypeObject, OperationObject, PathItemObject, ResolvedLimits, ResponseObject } from "./types.js";

// The document's paths: the lease routes, the record and object routes (one shape for both stores),
// and the unauthenticated operations routes.

export function leasePaths(): Record<string, PathItemObject> {
  const lease = (description: string): ResponseObject => ({ description, content: json(ref("schemas", "LeaseAnswer")) });
  return {
    "/v1/leases": {
      post: operation(
        {
          operationId: "createLease",
          summary: "Take a lease of one resource or of several (Redlock over the configured nodes)",
          description:
            "`resource` asks for one resource; `resources` for several, taken together as one lease — all of them or none — with a " +
            "token and a credential per resource (`fences`, in the order asked for; `fence`, `resource` and `token` are the first's). " +
            "Every resource must be in the API key's scope (403 otherwise, and nothing is taken). " +
            `A set holds 1-${MAX_RESOURCES} resources, none repeated, together at most ${MAX_LEASE_RESOURCE_BYTES} bytes of UTF-8 ` +
            "(the lease id carries them all): a longer set is a 400. " +
            "By default never waits for a held lock: 409 `lock-held` with Retry-After, and the client decides when to try again " +
            "(a gateway configured with lock retries retries within its acquire deadline). Lock nodes too few to reach a quorum: " +
            "503 `unavailable` after one attempt. " +
            "With `register: true` every fence of the lease is registered with every store of this gateway before it is answered " +
            "(fence-on-acquire): every older holder of each resource is refused from then on, also on keys this lease never writes; a store " +
            "that has seen a higher token refuses (409 `stale-token`) and the lease is released. Bodies up to 16 KiB.",
          tags: ["leases"],
          requestBody: ref("requestBodies", "LeaseCreateRequest"),
        },
        { "201": lease("The lease; `fence` is the credential every write of this lease presents") },
        [...JSON_BODY, "forbidden", "lockHeld", "tokenSpaceExhausted", "stale", "leaseLost", ...STORE_WRITE],
      ),
    },
    "/v1/leases/extend": {
      post: operation(
        {
          operationId: "extendLease",
          summary: "Extend a lease",
          description:
            "The lease id travels in the body, never in a path; a lease of several resources is extended whole (every resource or none), " +
            "and the caller's API key must cover each of them. The resources, tokens and holder come from the lease id, which the gateway " +
            "sealed: an edited id is refused (403 `invalid-lease-id`) and earns no credential. An id past its validUntil is refused as " +
            "`lease-lost` (`expired`) without asking the lock. The answer carries a new validUntil, a new credential good until then and " +
            "a new lease id: use them from now on (a credential per resource, as the lease answered them).",
          tags: ["leases"],
          requestBody: ref("requestBodies", "LeaseExtendRequest"),
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
            "Idempotent: releases the lock (every resource of the lease) only where it still holds this lease; a stale id releases nothing. " +
            "The caller's API key must cover every resource of the lease. An id this gateway did not " +
            "seal is refused (403 `invalid-lease-id`). The lease's credential is refused from its validUntil on, released or not.",
          tags: ["leases"],
          requestBody: ref("requestBodies", "LeaseReleaseRequest"),
        },
        { "204": { description: "Released (or no longer held)" } },
        [...JSON_BODY, "forbidden", "invalidLeaseId"],
      ),
    },
    // What the leases' tokens are checked against: each store's fence of a resource (routes/fences.ts).
    "/v1/fences/{resource}": fencesPath(),
  };
}

/** GET and HEAD /v1/fences/{resource}: a resource's fence in each store. */
function fencesPath(): PathItemObject {
  return {
    parameters: [
      {
        name: "resource",
        in: "path",
        required: true,
        description: `The resource, percent-encoded as UTF-8 into one path segment. ${ONE_SEGMENT}`,
        schema: { type: "string", minLength: 1 },
      },
    ],
    get: operation(
      {
        operationId: "getFences",
        summary: "A resource's fence in each configured store",
        description:
          "The highest token each store has admitted for the resource and the holder that presented it: what every write under " +
          "the resource is checked against (a write below it gets 409 `stale-token`). `null` where nothing was ever written or " +
          "registered under the resource. Any API key whose `resources` cover the resource may read it, read-only keys too.",
        tags: ["leases"],
      },
      { "200": { description: "Each configured store's fence", content: json(jsonSchema(fenceAnswerSchema, "output")) } },
      ["invalid", "forbidden", ...STORE],
    ),
    head: operation(
      {
        operationId: "headFences",
        summary: "The answer's headers of a fence read, without its body",
        description: `GET's checks and status, without the fences. ${HEADERS_ONLY}`,
        tags: ["leases"],
      },
      { "200": { description: "Each configured store's fence was read" } },
      ["invalid", "forbidden", ...STORE],
      "headers-only",
    ),
  };
}

type Store = "records" | "objects";

const HEADERS_ONLY =
  "A HEAD answer has no body, a refusal's included: its status (and Retry-After, WWW-Authenticate) is all there is; " +
  "GET the same path for the problem's `type` and `detail`.";

function readDescription(store: Store, method: "get" | "head"): string {
  if (method === "head")
    return `GET's checks, status and headers, without the ${store === "records" ? "record" : "object"}. ${HEADERS_ONLY}`;
  return store === "records"
    ? "The record's value as it was written (any JSON value), with the fence that wrote it in the headers."
    : "Streamed from S3 with backpressure, with the Content-Type it was written with and the fence that wrote it in the headers.";
}

export function keyPaths(store: Store, limits: ResolvedLimits): PathItemObject {
  return {
    parameters: [ref("parameters", "Key")],
    get: keyRead(store, "get"),
    head: keyRead(store, "head"),
    ...keyWrites(store, limits),
  };
}

/** "record" and "Record", or "object" and "Object": the store's word, in a sentence and in a name. */
function nouns(store: Store): { readonly noun: string; readonly Noun: string } {
  return store === "records" ? { noun: "record", Noun: "Record" } : { noun: "object", Noun: "Object" };
}

/** GET or HEAD of one record or object. */
function keyRead(store: Store, method: "get" | "head"): OperationObject {
  const { noun, Noun } = nouns(store);
  const readHeaders = {
    ETag: ref("headers", `ETag-${Noun}`),
    "Fencing-Token": ref("headers", "Fencing-Token"),
    "Fencing-Resource": ref("headers", "Fencing-Resource"),
    "Fencing-Holder": ref("headers", "Fencing-Holder"),
    ...(store === "objects" && { "Content-Length": ref("headers", "Content-Length") }),
  };
  const readContent: Record<string, MediaTypeObject> =
    store === "records"
      ? json(ref("schemas", "JsonValue"))
      : { "*/*": { schema: { description: "The object's bytes, with the Content-Type they were written with" } } };
  return operation(
    {
      operationId: `${method}${Noun}`,
      summary: method === "get" ? `Read a${store === "objects" ? "n" : ""} ${noun}` : `The headers of a ${noun} read, without its body`,
      description: readDescription(store, method),
      tags: [store],
    },
    {
      "200": {
        description: `The ${noun}: ETag is its version (for If-Match), Fencing-Token, Fencing-Resource and Fencing-Holder the fence that wrote it`,
        headers: readHeaders,
        ...(method === "get" && { content: readContent }),
      },
    },
    ["invalid", "forbidden", ...STORE],
    method === "get" ? "with-body" : "headers-only",
  );
}

/** PUT and DELETE of one record or object, under a fence. */
function keyWrites(store: Store, limits: ResolvedLimits): Pick<PathItemObject, "put" | "delete"> {
  const { noun, Noun } = nouns(store);
  const etag = ref("headers", `ETag-${Noun}`);
  const token = ref("headers", "Fencing-Token");
  const writeParameters = [
    ref("parameters", "Fencing-Credential"),
    ref("parameters", "Fencing-Token"),
    ref("parameters", "Fencing-Resource"),
    ref("parameters", "Fencing-Holder"),
    ref("parameters", `If-Match-${Noun}`),
  ];
  const bodyLimit = store === "records" ? limits.recordBytes : limits.objectBytes;
  const putBody =
    store === "records"
      ? {
          required: true,
          description: `Any JSON value, at most ${bodyLimit} bytes`,
          content: json(ref("schemas", "JsonValue")),
        }
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
    put: operation(
      {
        operationId: `put${Noun}`,
        summary: `Write a${store === "objects" ? "n" : ""} ${noun} under a fence`,
        description: guarantee,
        tags: [store],
        parameters: writeParameters,
        requestBody: putBody,
      },
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
      {
        "204": {
          description: "Deleted: ETag is the tombstone's version, Fencing-Token the token that wrote it",
          headers: { ETag: etag, "Fencing-Token": token },
        },
      },
      WRITE,
    ),
  };
}

/** POST /v1/records: several records in one transaction, each under the fence of the resource it names. */
export function recordWritesPath(limits: ResolvedLimits): PathItemObject {
  return {
    post: operation(
      {
        operationId: "putRecords",
        summary: "Write several records under the fences of one lease (or several), all or none",
        description:
          "One transaction: every credential in `fences` is checked against its resource's ratchet and raised — whether or not a write " +
          "names it — and every record is written as `PUT /v1/records/{key}` would write it under the fence of the resource it names " +
          "(`resource`: required with more than one credential; a new key becomes that resource's, a key of another resource is 409 " +
          "`resource-mismatch`; `ifVersion` a compare-and-set, 412 `version-mismatch`). Any refusal — a stale credential (409 " +
          "`stale-token`), a key's owner, a version — writes nothing, no ratchet raise included. " +
          "The credentials travel in the body, one per resource (the lease answer's `fences[].fence`), never as Fencing-Credential: a " +
          "set's credentials outgrow what servers and proxies accept in headers. Fencing-* and precondition headers are refused (400). " +
          "Each key must be in the API key's `keys`, each credential's resource in its `resources` (403). " +
          `At most ${MAX_RECORD_WRITES} records and ${MAX_RESOURCES} credentials, each key once; the whole body at most ${limits.recordBytes} bytes. ` +
          "Trusted lock clients, too, present credentials here. A records store without transactions (DynamoDB) cannot: 501 `not-supported`.",
        tags: ["records"],
        requestBody: ref("requestBodies", "RecordWritesRequest"),
      },
      {
        "200": {
          description: "Every record written: a version and a token per write, in order",
          content: json(ref("schemas", "RecordWritesAnswer")),
        },
      },
      [
        ...JSON_BODY,
        "forbidden",
        "invalidCredential",
        "credentialExpired",
        "stale",
        "resourceMismatch",
        "version",
        "notSupported",
        ...STORE_WRITE,
      ],
    ),
  };
}

const PUBLIC: readonly Record<string, readonly string[]>[] = [];
const ADMIN = "A gateway with an admin listener (`--admin-port`) serves it there only, and answers 404 `not-found` here.";

/** GET /readyz and /healthz: one answer, two names. */
function readiness(operationId: string, summary: string): OperationObject {
  return {
    operationId,
    summary,
    description:
      "Unauthenticated, for load balancers. Each configured backend is checked at once, each within the health deadline; the lock " +
      "is known as soon as a quorum of its nodes is (a node that has not answered by then is `pending`). Not ready (503): a store " +
      "answered that it is not set up for this gateway (not migrated, no such database or bucket, credentials refused), no " +
      "configured backend serves, or the instance drains. Ready but `degraded` (200): some backend does not answer while others " +
      "serve, as every instance sees it; its routes answer 503 with Retry-After. Public answers carry no address and no backend's " +
      `own message; the admin listener's add each lock node's address and each backend's message. ${ADMIN}`,
    tags: ["operations"],
    security: PUBLIC,
    responses: {
      "200": { description: "Ready: `ok`, or `degraded`", content: json(ref("schemas", "HealthReport")) },
      "503": { description: "Not ready: `unavailable` or `draining`", content: json(ref("schemas", "HealthReport")) },
      ...problemResponses(["notFound", "internal"]),
    },
  };
}

export function operationsPaths(): Record<string, PathItemObject> {
  return {
    "/livez": {
      get: {
        operationId: "getLiveness",
        summary: "Liveness: the process answers",
        description: `Unauthenticated, for orchestrators: 200 while the process's event loop answers; no backend is asked, and it stays 200 while the instance drains. ${ADMIN}`,
        tags: ["operations"],
        security: PUBLIC,
        responses: {
          "200": { description: "The process is alive", content: json(ref("schemas", "Liveness")) },
          ...problemResponses(["notFound", "internal"]),
        },
      },
    },
    "/readyz": { get: readiness("getReadiness", "Readiness: whether to send this instance requests") },
    "/healthz": { get: readiness("getHealth", "Readiness, as /readyz (its earlier name)") },
    "/metrics": {
      get: {
        operationId: "getMetrics",
        summary: "Prometheus metrics (text format)",
        description: `Unauthenticated, for scrapers. No label holds a key, a resource or an API key id. ${ADMIN}`,
        tags: ["operations"],
        security: PUBLIC,
        responses: {
          "200": { description: "The Prometheus text exposition format", content: { "text/plain": { schema: { type: "string" } } } },
          ...problemResponses(["notFound", "internal"]),
        },
      },
    },
    "/openapi.json": {
      get: {
        operationId: "getOpenApi",
        summary: "This document",
        description:
          "Unauthenticated. Its limits (TTL, body sizes) are this gateway's. Served by the API's listener only: an admin " +
          "listener (`--admin-port`) answers 404 `not-found`.",
        tags: ["operations"],
        security: PUBLIC,
        responses: {
          "200": { description: "The OpenAPI 3.1 document", content: json({ type: "object" }) },
          ...problemResponses(["notFound", "internal"]),
        },
      },
    },
  };
}
