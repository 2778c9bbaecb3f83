// The API document: a valid OpenAPI 3.1 document, made of the schemas that validate requests, and a
// checker (used on every answer the gateway's tests receive) that refuses what the document does not describe.
import { readFileSync } from "node:fs";
import { Ajv2020 } from "ajv/dist/2020.js";
import fc from "fast-check";
import { z } from "zod";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { createGateway } from "./index.js";
import { openApiDocument } from "./openapi/document.js";
import { HTTP_METHODS, type JsonSchema, type OpenApiDocument, type ParameterObject } from "./openapi/types.js";
import { ApiMismatchError, exchangeChecker, resolve, type Exchange } from "./openapi-test-support.js";
import { serve } from "./http/server.js";
import { API_KEYS, bearer, httpClient, KEYS } from "./test-support.js";
import { leaseBodySchema } from "./schemas/validation.js";
import { MAX_LEASE_RESOURCE_BYTES } from "./auth/lease-id.js";
import { jsonSchema } from "./openapi/components.js";
import { PROBLEM_KINDS, PROBLEM_TYPES } from "./problems/kinds.js";

const document = openApiDocument();

/** The JSON schema of one of components.requestBodies. */
function requestSchema(doc: OpenApiDocument, name: string): JsonSchema {
  const schema = doc.components.requestBodies[name]?.content["application/json"]?.schema;
  if (schema === undefined) throw new Error(`the document has no request body ${name}`);
  return schema;
}

/**
 * The OpenAPI Initiative's schema for 3.1 documents (2022-10-07; test-fixtures/README.md). Its
 * `$dynamicRef: "#meta"` (which lets a dialect extend Schema Objects) resolves, with no other
 * dialect in scope, to its own `$defs/schema`; ajv does not follow that dynamic scope, so the
 * reference is pointed there directly.
 */
function oasValidator() {
  const text = readFileSync(new URL("../test-fixtures/openapi-3.1-schema-2022-10-07.json", import.meta.url), "utf8");
  const schema = JSON.parse(text.replaceAll('"$dynamicRef": "#meta"', '"$ref": "#/$defs/schema"')) as Record<string, unknown>;
  return new Ajv2020({ allErrors: true, strict: false, validateFormats: false }).compile(schema);
}

/** Every object in the document with where it is. */
function* walk(node: unknown, at = "#"): Generator<[string, Record<string, unknown>]> {
  if (typeof node !== "object" || node === null) return;
  if (!Array.isArray(node)) yield [at, node as Record<string, unknown>];
  for (const [k, v] of Object.entries(node)) yield* walk(v, `${at}/${k}`);
}

describe("the OpenAPI document", () => {
  it("is a valid OpenAPI 3.1 document, and a broken one is not", () => {
    const validate = oasValidator();
    expect(validate(document), JSON.stringify(validate.errors, null, 1)).toBe(true);
    const broken = structuredClone(document) as unknown as {
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
    };
    (broken.paths["/v1/leases"]?.post as { responses: Record<string, unknown> }).responses["201"] = { content: {} }; // a response needs a description
    expect(validate(broken)).toBe(false);
  });

  it("has only draft 2020-12 schemas, references that resolve, declared path parameters, unique operation ids", () => {
    const ajv = new Ajv2020({ strict: true, validateFormats: false });
    for (const [at, node] of walk(document)) {
      if (typeof node.$ref === "string") expect(() => resolve(document, node as { $ref: string }), at).not.toThrow();
      // Every Schema Object is a valid draft 2020-12 schema, in ajv's strict mode (no unknown keywords).
      if (at.endsWith("/schema") || /\/components\/schemas\/[^/]+$/.test(at)) {
        const standalone = JSON.parse(JSON.stringify(node).replaceAll("#/components/schemas/", "urn:x#/$defs/")) as Record<string, unknown>;
        expect(ajv.validateSchema(standalone), `${at}: ${ajv.errorsText()}`).toBe(true);
      }
    }
    const ids = new Set<string>();
    for (const [template, item] of Object.entries(document.paths)) {
      const inPath = [...template.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
      for (const method of HTTP_METHODS) {
        const op = item[method];
        if (op === undefined) continue;
        expect(ids.has(op.operationId), op.operationId).toBe(false);
        ids.add(op.operationId);
        const params = [...(item.parameters ?? []), ...(op.parameters ?? [])].map((p) => resolve<ParameterObject>(document, p));
        expect(
          params
            .filter((p) => p.in === "path")
            .map((p) => p.name)
            .sort(),
          `${method} ${template}`,
        ).toEqual([...inPath].sort());
        for (const p of params.filter((q) => q.in === "path")) expect(p.required, `${template} ${p.name}`).toBe(true);
        // OpenAPI ignores these as header parameters: Authorization is the bearer security scheme.
        for (const p of params.filter((q) => q.in === "header"))
          expect(["authorization", "accept", "content-type"]).not.toContain(p.name.toLowerCase());
        for (const requirement of op.security ?? document.security)
          for (const name of Object.keys(requirement)) expect(document.components.securitySchemes).toHaveProperty(name);
        for (const status of Object.keys(op.responses)) expect(status, `${method} ${template}`).toMatch(/^[1-5][0-9]{2}$/);
      }
    }
    expect(ids.size).toBe(19);
  });

  it("states every problem type the gateway has, each with its status", () => {
    const statuses = new Map<string, number>();
    for (const [, node] of walk(document.components.schemas)) {
      const props = node.properties as Record<string, { const?: unknown }> | undefined;
      if (typeof props?.type?.const === "string") statuses.set(props.type.const, props.status?.const as number);
    }
    expect(statuses).toEqual(
      new Map([
        ["/problems/invalid-request", 400],
        ["/problems/unauthorized", 401],
        ["/problems/forbidden", 403],
        ["/problems/credential-required", 403],
        ["/problems/invalid-credential", 403],
        ["/problems/credential-expired", 403],
        ["/problems/invalid-lease-id", 403],
        ["/problems/not-found", 404],
        ["/problems/method-not-allowed", 405],
        ["/problems/stale-token", 409],
        ["/problems/resource-mismatch", 409],
        ["/problems/lock-held", 409],
        ["/problems/token-space-exhausted", 409],
        ["/problems/lease-lost", 409],
        ["/problems/version-mismatch", 412],
        ["/problems/too-large", 413],
        ["/problems/unsupported-media-type", 415],
        ["/problems/corrupt-state", 502],
        ["/problems/backend-error", 502],
        ["/problems/unavailable", 503],
        ["/problems/outcome-unknown", 503],
        ["/problems/overloaded", 503],
        ["/problems/backend-misconfigured", 503],
        ["/problems/not-supported", 501],
        ["/problems/internal", 500],
      ]),
    );
  });

  it("lists every problem type with its status in the README's error table, and no other", () => {
    const readme = readFileSync(new URL("../../../README.md", import.meta.url), "utf8");
    const rows = [...readme.matchAll(/^\| (\d{3}) \| `(\/problems\/[a-z-]+)` \|/gm)].map((m) => [m[2], Number(m[1])] as const);
    expect(new Map(rows)).toEqual(new Map(Object.values(PROBLEM_TYPES).map((t) => [t.type, t.status] as const)));
    expect(rows.length).toBe(PROBLEM_KINDS.length);
  });

  it("types requests by zod's input side and answers by its output side; request schemas reach no component with a default", () => {
    // A field with a default may be left out of a request, and is always in an answer.
    const withDefault = z.strictObject({ register: z.boolean().default(false) });
    expect(jsonSchema(withDefault, "input")).not.toHaveProperty("required");
    expect(jsonSchema(withDefault, "output")).toMatchObject({ required: ["register"] });
    // Exactly one of a resource and a set of resources, each with `register` optional.
    expect(requestSchema(document, "LeaseCreateRequest")).toMatchObject({
      oneOf: [
        { properties: { register: { default: false } }, required: ["resource", "ttlMs"] },
        { properties: { register: { default: false } }, required: ["resources", "ttlMs"] },
      ],
    });
    // Client generators read a property with a default in a schema component as always there (true of
    // answers only), so no request reaches one: every components.schemas entry a request's schema
    // refers to, directly or through others, is free of defaults.
    const requests: unknown[] = [document.components.requestBodies, document.components.parameters];
    for (const item of Object.values(document.paths))
      for (const method of HTTP_METHODS) requests.push(item[method]?.requestBody, item[method]?.parameters);
    const reached = new Set<string>();
    const follow = (node: unknown): void => {
      for (const [, object] of walk(node)) {
        const target = object.$ref;
        if (typeof target !== "string" || !target.startsWith("#/components/schemas/") || reached.has(target)) continue;
        reached.add(target);
        follow(resolve(document, { $ref: target }));
      }
    };
    requests.forEach(follow);
    expect([...reached]).toContain("#/components/schemas/JsonValue");
    for (const target of reached)
      for (const [at, object] of walk(resolve(document, { $ref: target }), target)) expect(object, at).not.toHaveProperty("default");
    // A recursive zod schema would refer to its own root, which is the document's once embedded.
    expect(() => jsonSchema(z.json(), "output")).toThrow(/references/);
  });

  it("describes lease bodies exactly as the gateway validates them (the same zod schemas)", () => {
    const maxTtlMs = 60_000;
    const doc = openApiDocument({ maxTtlMs });
    const ajv = new Ajv2020({ strict: true });
    const zod = leaseBodySchema(maxTtlMs);
    const pairs = [
      [zod.create, ajv.compile(requestSchema(doc, "LeaseCreateRequest"))],
      [zod.extend, ajv.compile(requestSchema(doc, "LeaseExtendRequest"))],
      [zod.release, ajv.compile(requestSchema(doc, "LeaseReleaseRequest"))],
    ] as const;
    // Strings of ASCII with control characters, up to past the resource limit (the document's JSON
    // Schema counts code points and JavaScript UTF-16 units: the two agree on these).
    const value = fc.oneof(
      fc.constant("orders/1"),
      fc.string({ unit: "binary-ascii", maxLength: 600 }),
      fc.string({ minLength: 500, maxLength: 520 }),
      fc.integer(),
      fc.double(),
      fc.boolean(),
      fc.constant(null),
    );
    const ttl = fc.oneof(
      fc.integer({ min: -2, max: maxTtlMs + 2 }),
      fc.double(),
      fc.constant(maxTtlMs),
      fc.constant(1),
      fc.constant(99),
      fc.constant(100),
      fc.string(),
    );
    // Sets of resources, repeats and bad elements included; never past the bound on their bytes, which
    // the document states in words only (JSON Schema cannot count UTF-8 bytes): checked below.
    const resources = fc.oneof(
      fc.array(fc.oneof(fc.constantFrom("a", "b", "orders/1"), value), { maxLength: 3 }),
      fc.array(fc.string({ unit: "binary-ascii", maxLength: 20 }), { minLength: 60, maxLength: 68 }),
      value,
    );
    const body = fc.record(
      { resource: value, resources, ttlMs: ttl, register: fc.oneof(fc.boolean(), value), leaseId: value, extra: value },
      { requiredKeys: [] },
    );
    // The lock's floor is the document's: a TTL under it is a 400 before any lock node is asked.
    expect(zod.create.safeParse({ resource: "r", ttlMs: 99 }).success).toBe(false);
    expect(zod.create.safeParse({ resource: "r", ttlMs: 100 }).success).toBe(true);
    const bytes = (b: { resources?: unknown }): number =>
      Array.isArray(b.resources) ? b.resources.reduce((n: number, r) => n + (typeof r === "string" ? Buffer.byteLength(r) : 0), 0) : 0;
    fc.assert(
      fc.property(body, (b) => {
        fc.pre(bytes(b) <= MAX_LEASE_RESOURCE_BYTES);
        for (const [schema, validate] of pairs) expect(validate(b), JSON.stringify(b)).toBe(schema.safeParse(b).success);
        // The route's reading of a body (which of the two it meant) accepts exactly what the schema does.
        let granted = true;
        try {
          zod.grant(b);
        } catch {
          granted = false;
        }
        expect(granted, JSON.stringify(b)).toBe(zod.create.safeParse(b).success);
      }),
      { numRuns: 2_000 },
    );
    // The one rule the document states only in words: a set past the bound matches its JSON Schema, and is refused.
    const long = { resources: ["a".repeat(512), "b".repeat(512), "c".repeat(512), "d"], ttlMs: 1_000 };
    expect(ajv.compile(requestSchema(doc, "LeaseCreateRequest"))(long)).toBe(true);
    expect(zod.create.safeParse(long).success).toBe(false);
    expect(JSON.stringify(requestSchema(doc, "LeaseCreateRequest"))).toContain(`at most ${MAX_LEASE_RESOURCE_BYTES} bytes of UTF-8`);
  });
});

describe("the answer checker", () => {
  const check = exchangeChecker(document);
  const json = { "content-type": "application/json; charset=utf-8" };
  const problem = { "content-type": "application/problem+json" };
  // Every answer carries X-Request-Id: `at` adds one unless the headers name it (an empty value: left out).
  const at = (method: string, path: string, status: number, headers: Record<string, string>, body: unknown = undefined): Exchange => ({
    method,
    path,
    status,
    headers: Object.fromEntries(Object.entries({ "x-request-id": "req-1", ...headers }).filter(([, v]) => v !== "")),
    body: Buffer.from(body === undefined ? "" : typeof body === "string" ? body : JSON.stringify(body)),
  });
  const written = { ...json, etag: '"7"', "fencing-token": "3" };
  const stale = {
    type: "/problems/stale-token",
    title: "Stale fencing token",
    status: 409,
    detail: "stale",
    resource: "a",
    token: "3",
    highest: "4",
  };

  it("passes answers the document describes", () => {
    check(at("PUT", "/v1/records/a/b/c", 200, written, { version: "7", token: "3" }));
    check(at("PUT", "/v1/records/a?x=1", 409, problem, stale));
    check(at("HEAD", "/v1/records/a", 200, { ...json, etag: '"7"', "fencing-token": "3", "fencing-resource": "a" }));
    const read = { ...json, etag: '"7"', "fencing-token": "3", "fencing-resource": "a" };
    // A record's value: any JSON value, arrays in arrays and objects in arrays included.
    fc.assert(
      fc.property(fc.jsonValue(), (value) => check(at("GET", "/v1/records/a", 200, read, JSON.stringify(value)))),
      { numRuns: 500 },
    );
    check(at("DELETE", "/v1/objects/a", 204, { etag: `"${"0".repeat(32)}"`, "fencing-token": "3" }));
    check(at("DELETE", "/v1/records/a", 204, { etag: '"8"', "fencing-token": "3" }));
    check(
      at(
        "PATCH",
        "/v1/records/a",
        405,
        { ...problem, allow: "GET, HEAD, PUT, DELETE" },
        { type: "/problems/method-not-allowed", title: "Method not allowed", status: 405 },
      ),
    );
    check(at("GET", "/nowhere", 404, problem, { type: "/problems/not-found", title: "Not found", status: 404, detail: "no such route" }));
    check(at("GET", "/metrics", 200, { "content-type": "text/plain; version=0.0.4" }, "# nothing\n"));
  });

  it("refuses an undocumented status, a body of another shape, a missing header, another problem type, another media type", () => {
    const refused = (exchange: Exchange, why: RegExp): void => {
      expect(() => check(exchange)).toThrow(ApiMismatchError);
      expect(() => check(exchange)).toThrow(why);
    };
    refused(at("PUT", "/v1/records/a", 418, problem, { ...stale, status: 418 }), /status 418 is not documented for putRecord/);
    refused(at("PUT", "/v1/records/a", 200, written, { version: "7" }), /must have required property 'token'/);
    refused(
      at("PUT", "/v1/records/a", 200, { ...written, "x-request-id": "" }, { version: "7", token: "3" }),
      /header X-Request-Id is required/,
    );
    refused(at("GET", "/metrics", 200, { "content-type": "text/plain", "x-request-id": "no spaces" }, ""), /X-Request-Id/);
    refused(at("PUT", "/v1/records/a", 200, written, { version: "7", token: 3 }), /token must be string/);
    refused(
      at("PUT", "/v1/objects/a", 200, { ...written, etag: `"${"a".repeat(32)}"` }, { version: "7", token: "3" }),
      /version must match pattern/,
    );
    refused(at("PUT", "/v1/records/a", 200, { ...json, "fencing-token": "3" }, { version: "7", token: "3" }), /header ETag is required/);
    refused(
      at("PUT", "/v1/records/a", 409, problem, {
        type: "/problems/lock-held",
        title: "The lock is held by another lease",
        status: 409,
        resource: "a",
      }),
      /does not match/,
    );
    refused(at("PUT", "/v1/records/a", 409, problem, { ...stale, note: "an undocumented member" }), /does not match/);
    refused(at("POST", "/v1/leases", 201, { "content-type": "text/html" }, "<p>ok</p>"), /Content-Type text\/html is not documented/);
    refused(at("GET", "/nowhere", 200, json, {}), /must answer 404/);
    refused(at("PATCH", "/v1/records/a", 200, json, {}), /expected 405 or 404/);
    refused(
      at("PATCH", "/v1/records/a", 405, problem, { type: "/problems/method-not-allowed", title: "Method not allowed", status: 405 }),
      /header Allow is required/,
    );
    refused(at("POST", "/v1/leases/release", 204, json, "{}"), /no body is documented/);
  });
});

describe("GET /openapi.json", () => {
  it("serves the document with the gateway's own limits, unauthenticated", async () => {
    const gateway = createGateway({
      apiKeys: API_KEYS,
      limits: { maxTtlMs: 5_000 },
      logger: pino({ level: "silent" }),
      defaultMetrics: false,
    });
    const serving = await serve(gateway.app, { port: 0 });
    const client = httpClient(serving.port);
    try {
      const served = await client.send({ method: "GET", path: "/openapi.json" });
      expect(served.status).toBe(200);
      const doc = served.json<OpenApiDocument>();
      expect(doc).toEqual(JSON.parse(JSON.stringify(openApiDocument({ maxTtlMs: 5_000 }))));
      expect(requestSchema(doc, "LeaseCreateRequest")).toMatchObject({
        oneOf: [{ properties: { ttlMs: { maximum: 5_000 } } }, { properties: { ttlMs: { maximum: 5_000 } } }],
      });
      // A gateway without backends: its routes answer as the document says (the client checks each answer).
      expect((await client.json("POST", "/v1/leases", { resource: "a", ttlMs: 1_000 }, bearer(KEYS.admin))).status).toBe(404);
      expect((await client.send({ method: "GET", path: "/v1/records/a", headers: bearer(KEYS.admin) })).status).toBe(404);
    } finally {
      client.close();
      await serving.drain(1_000);
    }
  });
});
