import { postgresRecords } from "./stores/postgres.js";
import { dynamoRecords } from "./stores/dynamodb.js";
import { azureBlobObjects } from "./stores/azure-blob.js";
import { s3Objects } from "./stores/s3.js";
import { createHash } from "node:crypto";
import fc from "fast-check";
import pg from "pg";
import type { Request } from "express";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { InvalidArgumentError } from "@fenced/fence";
import {
  ContentionError,
  CorruptStateError,
  OutcomeUnknownError,
  ResourceMismatchError,
  StaleTokenError,
  StoreSetupError,
  StoreUnavailableError,
  VersionMismatchError,
} from "@fenced/store";
import { MAX_TOKEN } from "@fenced/fence";
import { credentialKeys } from "@fenced/fence/credentials";
import { ApiKeys } from "./auth/api-keys.js";
import { loadConfig } from "./config.js";
import { decodeLeaseId, encodeLeaseId, LEASE_ID_PATTERN } from "./auth/lease-id.js";
import { GatewayMetrics } from "./ops/metrics.js";
import { BackendFailedError } from "./problems/backend-errors.js";
import { problemSchema } from "./problems/kinds.js";
import { classify, HttpProblem } from "./problems/problem.js";
import { decodeHeaderText, encodeHeaderText, keyFromPath, tokenSchema } from "./schemas/validation.js";

/** The gateway's pure parts: no server needed. */
describe("lease ids", () => {
  const key = { id: "current", secret: Buffer.alloc(32, 7) };
  const keys = credentialKeys([key, { id: "previous", secret: Buffer.alloc(32, 9) }]);
  const problem = (f: () => unknown): string => {
    try {
      f();
    } catch (err) {
      if (err instanceof HttpProblem) return String(err.kind);
      throw err;
    }
    return "accepted";
  };

  it("round-trip every resource, token, value and end, and have exactly one spelling", () => {
    // eslint-disable-next-line no-control-regex -- the control characters a resource may not hold
    const resource = fc.string({ unit: "grapheme", minLength: 1, maxLength: 100 }).filter((r) => !/[\u0000-\u001f\u007f-\u009f]/.test(r));
    fc.assert(
      fc.property(
        resource,
        fc.bigInt({ min: 0n, max: MAX_TOKEN }),
        fc.stringMatching(/^[0-9a-f]{32}$/),
        fc.nat(),
        (r, token, value, validUntil) => {
          const id = encodeLeaseId({ fences: [{ resource: r, token }], value, validUntil }, key);
          expect(id).toMatch(LEASE_ID_PATTERN);
          expect(id.startsWith("fl1.")).toBe(true);
          expect(decodeLeaseId(id, keys)).toEqual({ fences: [{ resource: r, token }], value, validUntil });
        },
      ),
    );
  });

  it("refuse anything they did not seal: malformed is a 400, an edited or forged id a 403", () => {
    const value = "0".repeat(32);
    const id = encodeLeaseId({ fences: [{ resource: "a", token: 1n }], value, validUntil: 1_800_000_000_000 }, key);
    // The unsealed spellings of earlier versions, and shapes that are no lease id at all.
    for (const bad of [
      "",
      "1",
      `1.${value}.YQ`,
      `fl1.current`,
      id.replace(/^fl1/, "fl2"),
      `${id}=`,
      `${id}.x`,
      id.slice(0, -1),
      "x".repeat(5000),
    ]) {
      expect(
        problem(() => decodeLeaseId(bad, keys)),
        bad,
      ).toBe("invalid");
    }
    const [v, k, payload, mac] = id.split(".") as [string, string, string, string];
    const edit = (from: string, to: string): string =>
      Buffer.from(Buffer.from(payload, "base64url").toString("utf8").replace(from, to)).toString("base64url");
    for (const [what, forged] of [
      ["token", [v, k, edit("1\n", "101\n"), mac]],
      ["value", [v, k, edit(value, "1".repeat(32)), mac]],
      ["end", [v, k, edit("1800000000000", "1900000000000"), mac]],
      ["resource", [v, k, edit("\na", "\nb"), mac]],
      ["key id", [v, "previous", payload, mac]],
    ] as const) {
      expect(
        problem(() => decodeLeaseId(forged.join("."), keys)),
        what,
      ).toBe("invalidLeaseId");
    }
    expect(
      problem(() =>
        decodeLeaseId(
          encodeLeaseId({ fences: [{ resource: "a", token: 1n }], value, validUntil: 1 }, { id: "current", secret: Buffer.alloc(32, 8) }),
          keys,
        ),
      ),
    ).toBe("invalidLeaseId");
    expect(problem(() => decodeLeaseId([v, "retired", payload, mac].join("."), keys))).toBe("invalidLeaseId");
  });
});

describe("request parts", () => {
  it("tokens: decimal strings from 0 to 2^63-1, one spelling each", () => {
    expect(tokenSchema.parse("0")).toBe(0n);
    expect(tokenSchema.parse(MAX_TOKEN.toString())).toBe(MAX_TOKEN);
    for (const bad of ["", "-1", "01", "1.0", "1e3", " 1", "0x1", (MAX_TOKEN + 1n).toString(), "99999999999999999999", "1, 2"]) {
      expect(tokenSchema.safeParse(bad).success, bad).toBe(false);
    }
  });

  it("keys: decoded once and checked by the store's rules", () => {
    expect(keyFromPath("/a/b%20c")).toBe("a/b c");
    expect(keyFromPath("/a%2Fb")).toBe("a/b");
    expect(keyFromPath("/a%EF%BF%BD")).toBe("a\uFFFD");
    // A lone surrogate: percent-encoded it is not UTF-8; arriving already decoded, the key rule refuses it.
    const loneSurrogates = ["/a%ED%A0%80", "/a%ED%B0%80", "/a\uD800", "/\uDC00b"];
    for (const bad of ["/", "/a/../b", "/a/%2e%2E/b", "//a", "/a/", "/a%00", "/%zz", "/%C2%85", `/${"k".repeat(513)}`, ...loneSurrogates])
      expect(() => keyFromPath(bad), bad).toThrow(HttpProblem);
  });

  it("header text: percent-encoding round-trips any well-formed string", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme" }), (s) => {
        expect(decodeHeaderText(encodeHeaderText(s), "x")).toBe(s);
      }),
    );
    expect(encodeHeaderText("a/b c%ü")).toBe("a/b%20c%25%C3%BC");
  });
});

describe("problems", () => {
  it("map every store outcome by its type, with the table's status, Retry-After and extensions", () => {
    const cases = [
      [new StoreUnavailableError("postgres", "timeout", "put"), "unavailable", 503, "1"],
      [new StoreUnavailableError("s3", "throttled", "get"), "unavailable", 503, "1"],
      [new ContentionError("k", 64, "gave up"), "unavailable", 503, "1"],
      [new OutcomeUnknownError("s3", "orders/1", "put"), "outcomeUnknown", 503, "1"],
      [new OutcomeUnknownError("postgres", undefined, "register"), "outcomeUnknown", 503, "1"],
      [new StoreSetupError("postgres", "not-migrated", "no table"), "backendMisconfigured", 503, "30"],
      [new StoreSetupError("s3", "no-such-bucket", "no bucket"), "backendMisconfigured", 503, "30"],
      [new CorruptStateError("s3", "manifest", "orders/1", "truncated"), "corruptState", 502, undefined],
      [new BackendFailedError("s3", "get", "AccessDenied", { cause: new Error("denied") }), "backendError", 502, undefined],
    ] as const;
    for (const [err, kind, status, retryAfter] of cases) {
      const problem = classify(err);
      expect(problem.kind, err.message).toBe(kind);
      expect(problem.body.status).toBe(status);
      expect(problem.headers["Retry-After"]).toBe(retryAfter);
      // The body is exactly what the API document says a problem of this kind carries.
      expect(problemSchema(kind).safeParse(problem.body).success, JSON.stringify(problem.body)).toBe(true);
    }
    expect(classify(new OutcomeUnknownError("s3", "orders/1", "put")).body).toMatchObject({ backend: "s3", key: "orders/1" });
    expect(classify(new StoreSetupError("s3", "no-such-bucket", "x")).body).toMatchObject({ backend: "s3", problem: "no-such-bucket" });
  });

  it("map each error to its status; a client mistake is never a 5xx", () => {
    const stale = classify(new StaleTokenError("r", 33n, 2n ** 62n));
    expect(stale.body).toMatchObject({ status: 409, type: "/problems/stale-token", token: "33", highest: (2n ** 62n).toString() });
    expect(classify(new VersionMismatchError("k", "1", undefined)).body).toMatchObject({ status: 412, actual: null });
    expect(classify(z.strictObject({ a: z.number() }).safeParse({ b: 1 }).error).body.status).toBe(400);
    expect(classify(new InvalidArgumentError("fence.token", "must be a bigint")).body).toMatchObject({
      status: 400,
      errors: [{ path: "fence.token" }],
    });
    const mismatch = classify(new ResourceMismatchError("orders/42", "orders/42-x", "orders/42"));
    expect(mismatch.body).toMatchObject({
      status: 409,
      type: "/problems/resource-mismatch",
      key: "orders/42",
      resource: "orders/42-x",
      owner: "orders/42",
    });
    expect(classify(new ContentionError("k", 64, "gave up")).body.status).toBe(503);
    expect(classify(new URIError("bad")).body.status).toBe(400);
    expect(classify(Object.assign(new Error("too big"), { status: 413, expose: true })).body.status).toBe(413);
    expect(classify(Object.assign(new Error("charset"), { status: 415, expose: true })).body.status).toBe(415);
    // A TypeError or RangeError that is not InvalidArgumentError is a bug of ours, never the client's mistake.
    for (const bug of [new TypeError("x is not a function"), new RangeError("Invalid array length")]) {
      expect(classify(bug).body.status, bug.message).toBe(500);
      expect(JSON.stringify(classify(bug).body)).not.toContain(bug.message);
    }
    const internal = classify(new Error("secret detail"));
    expect(internal.body.status).toBe(500);
    expect(JSON.stringify(internal.body)).not.toContain("secret detail");
  });

  it("backend failures are judged by type and code where the backend was called, never by message", async () => {
    const metrics = new GatewayMetrics();
    // Each family's failures are told by the registration serving it (app.ts: servedStores).
    metrics.servedBy("records", postgresRecords);
    metrics.servedBy("objects", s3Objects);
    const failWith = (store: "records" | "objects", err: Error): Promise<number> =>
      metrics
        .time(store, "put", () => Promise.reject(err))
        .then(
          () => 0,
          (thrown: unknown) => classify(thrown).body.status,
        );
    // The backend's own error answer, which the stores pass on unchanged: 502, never a 500.
    const denied = new pg.DatabaseError("permission denied for schema fenced", 0, "error");
    expect(await failWith("records", Object.assign(denied, { code: "42501", severity: "ERROR" }))).toBe(502);
    const accessDenied = Object.assign(new Error("AccessDenied"), { $fault: "client", $metadata: { httpStatusCode: 403 } });
    expect(await failWith("objects", accessDenied)).toBe(502);
    // node-postgres's DatabaseError of another copy of pg (an embedder's pool): recognised by shape, not by class.
    class OtherDatabaseError extends Error {
      constructor(
        readonly code: string,
        readonly severity: string,
      ) {
        super("permission denied for schema fenced");
      }
    }
    expect(await failWith("records", new OtherDatabaseError("42501", "ERROR"))).toBe(502);
    expect(await failWith("records", new OtherDatabaseError("3D000", "FATAL"))).toBe(502);
    // The SDK's client failures: an answer it could not parse ($metadata, no $fault), a TLS error that
    // went through its middleware, credentials its provider could not obtain (no $metadata at all).
    const unparsed = Object.assign(new Error("Deserialization error"), { $metadata: { httpStatusCode: 200 } });
    expect(await failWith("objects", unparsed)).toBe(502);
    const tls = Object.assign(new Error("self-signed certificate"), { code: "DEPTH_ZERO_SELF_SIGNED_CERT", $metadata: { attempts: 3 } });
    expect(await failWith("objects", tls)).toBe(502);
    const credentials = Object.assign(new Error("Could not load credentials from any providers"), { name: "CredentialsProviderError" });
    expect(await failWith("objects", credentials)).toBe(502);
    // A shape of one backend's error means nothing for another's store, nor for the lock.
    expect(await failWith("records", credentials)).toBe(500);
    expect(await failWith("objects", new OtherDatabaseError("42501", "ERROR"))).toBe(500);
    // The stores wrap every connection failure in their typed errors: any other plain Error is the gateway's own (500).
    expect(await failWith("objects", new Error("manifest has no header line"))).toBe(500);
    // Typed store errors pass through the timing untouched.
    expect(await failWith("records", new StoreUnavailableError("postgres", "refused", "put"))).toBe(503);
  });

  it("Azure's and DynamoDB's failures are told by the registration serving the family, a client failure without an answer included", async () => {
    const metrics = new GatewayMetrics();
    metrics.servedBy("records", dynamoRecords);
    metrics.servedBy("objects", azureBlobObjects);
    const failWith = (store: "records" | "objects", err: Error): Promise<number> =>
      metrics
        .time(store, "put", () => Promise.reject(err))
        .then(
          () => 0,
          (thrown: unknown) => classify(thrown).body.status,
        );
    // Azure's RestError, by shape: an answer the store passed on, and a TLS failure before any answer.
    const forbidden = Object.assign(new Error("This request is not authorized"), {
      name: "RestError",
      code: "AuthorizationFailure",
      statusCode: 403,
    });
    expect(await failWith("objects", forbidden)).toBe(502);
    expect(
      await failWith("objects", Object.assign(new Error("certificate has expired"), { name: "RestError", code: "CERT_HAS_EXPIRED" })),
    ).toBe(502);
    const denied = Object.assign(new Error("AccessDeniedException"), {
      $fault: "client",
      $metadata: { httpStatusCode: 400 },
      name: "AccessDeniedException",
    });
    expect(await failWith("records", denied)).toBe(502);
    // One backend's shape means nothing for the other's family.
    expect(await failWith("records", forbidden)).toBe(500);
  });
});

describe("API keys", () => {
  const req = (authorization?: string): Request => ({ headers: authorization === undefined ? {} : { authorization } }) as Request;

  it("refuse weak, duplicate or ambiguous configurations", () => {
    expect(() => new ApiKeys([])).toThrow();
    expect(() => new ApiKeys([{ id: "a", key: "short", resources: [""], keys: [""] }])).toThrow();
    expect(() => new ApiKeys([{ id: "a", key: "k".repeat(16), sha256: "0".repeat(64), resources: [""], keys: [""] }])).toThrow();
    expect(
      () =>
        new ApiKeys([
          { id: "a", key: "k".repeat(16), resources: [""], keys: [""] },
          { id: "a", key: "j".repeat(16), resources: [""], keys: [""] },
        ]),
    ).toThrow(/duplicate/);
    expect(
      () =>
        new ApiKeys([
          { id: "a", key: "k".repeat(16), resources: [""], keys: [""] },
          { id: "b", key: "k".repeat(16), resources: [""], keys: [""] },
        ]),
    ).toThrow(/same secret/);
  });

  it("authenticate the bearer key (scheme case-insensitive, secret exact)", () => {
    const keys = new ApiKeys([{ id: "a", key: "k".repeat(16), resources: ["r/"], keys: ["k/"] }]);
    expect(keys.authenticate(req(`Bearer ${"k".repeat(16)}`)).id).toBe("a");
    expect(keys.authenticate(req(`bearer ${"k".repeat(16)}`)).id).toBe("a");
    for (const bad of [
      undefined,
      "",
      "Bearer",
      `Bearer ${"k".repeat(15)}`,
      `Bearer ${"K".repeat(16)}`,
      `Basic ${"k".repeat(16)}`,
      "k".repeat(16),
    ]) {
      expect(() => keys.authenticate(req(bad)), String(bad)).toThrow(HttpProblem);
    }
  });

  it("find each of many keys by its digest; the digest itself is no key", () => {
    const secret = (i: number): string => `key-${String(i).padStart(4, "0")}-0123456789abcdef`;
    const digestOf = (text: string): string => createHash("sha256").update(text).digest("hex");
    const configs = Array.from({ length: 1_000 }, (_, i) =>
      i % 2 === 0
        ? { id: `k${i}`, key: secret(i), resources: [""], keys: [""] }
        : { id: `k${i}`, sha256: digestOf(secret(i)), resources: [""], keys: [""] },
    );
    const keys = new ApiKeys(configs);
    for (let i = 0; i < 1_000; i++) expect(keys.authenticate(req(`Bearer ${secret(i)}`)).id).toBe(`k${i}`);
    // What a configuration may hold in the clear does not authenticate: a key must hash to it.
    for (const i of [0, 1, 999]) expect(() => keys.authenticate(req(`Bearer ${digestOf(secret(i))}`))).toThrow(HttpProblem);
    // A key that looks like a digest (`openssl rand -hex 32`) is a key like any other.
    const hexKey = digestOf("a random key");
    const hexKeys = new ApiKeys([{ id: "hex", key: hexKey, resources: [""], keys: [""] }]);
    expect(hexKeys.authenticate(req(`Bearer ${hexKey}`)).id).toBe("hex");
    expect(() => hexKeys.authenticate(req(`Bearer ${digestOf(hexKey)}`))).toThrow(HttpProblem);
  });

  it("answer each request once: a request asked about again gets its own answer, never another request's", () => {
    const keys = new ApiKeys([
      { id: "a", key: "a".repeat(16), resources: [""], keys: [""] },
      { id: "b", key: "b".repeat(16), resources: [""], keys: [""] },
    ]);
    const first = req(`Bearer ${"a".repeat(16)}`);
    const second = req(`Bearer ${"b".repeat(16)}`);
    const forged = req(`Bearer ${"c".repeat(16)}`);
    // Asked twice each, in turn (admission control, then the route): each keeps its own principal or refusal.
    for (let i = 0; i < 2; i++) {
      expect(keys.authenticate(first).id).toBe("a");
      expect(keys.authenticate(second).id).toBe("b");
      expect(() => keys.authenticate(forged)).toThrow(HttpProblem);
    }
  });

  it("a request another set of keys authenticated is judged again by these: the kept answer is its own keys'", () => {
    const one = new ApiKeys([{ id: "a", key: "a".repeat(16), resources: [""], keys: [""] }]);
    const other = new ApiKeys([{ id: "z", key: "z".repeat(16), resources: [""], keys: [""] }]);
    const asked = req(`Bearer ${"a".repeat(16)}`);
    expect(one.authenticate(asked).id).toBe("a");
    expect(() => other.authenticate(asked)).toThrow(HttpProblem);
    expect(one.authenticate(asked).id).toBe("a");
  });
});

describe("configuration", () => {
  const file = JSON.stringify({
    apiKeys: [{ id: "f", key: "f".repeat(16), resources: [""], keys: [""] }],
    port: 1000,
    postgres: { url: "postgres://file", poolSize: 4 },
    s3: { bucket: "file-bucket" },
  });
  const read = (): string => file;

  it("file < environment < flags, section by section", () => {
    const c = loadConfig(
      { config: "x.json", port: "3000" },
      { FENCED_GATEWAY_PORT: "2000", FENCED_GATEWAY_POSTGRES_URL: "postgres://env", FENCED_GATEWAY_S3_REGION: "eu-west-1" },
      read,
    );
    expect(c.port).toBe(3000);
    expect(c.postgres).toMatchObject({ url: "postgres://env", poolSize: 4 });
    expect(c.s3).toMatchObject({ bucket: "file-bucket", region: "eu-west-1" });
    expect(c.apiKeys[0]?.id).toBe("f");
    const fenceKeys = JSON.stringify([{ id: "k1", secret: Buffer.alloc(32, 1).toString("base64") }]);
    expect(
      loadConfig(
        { migrate: false, redis: "redis://a:1, redis://b:2" },
        { FENCED_GATEWAY_CONFIG: "x.json", FENCED_GATEWAY_FENCE_KEYS: fenceKeys },
        read,
      ),
    ).toMatchObject({
      migrate: false,
      redis: { urls: ["redis://a:1", "redis://b:2"], retryCount: 0 },
    });
  });

  it("leases need fence keys: lease ids and credentials are sealed with them", () => {
    expect(() => loadConfig({ redis: "redis://a:1" }, { FENCED_GATEWAY_CONFIG: "x.json" }, read)).toThrow(
      /fenceKeys[\s\S]*leases \(redis\) need fence keys/,
    );
  });

  it("a backend's options without the field that enables it name that field's variable", () => {
    const env = { FENCED_GATEWAY_API_KEYS: JSON.stringify([{ id: "a", key: "k".repeat(16), resources: [""], keys: [""] }]) };
    expect(() =>
      loadConfig(
        {},
        {
          ...env,
          FENCED_GATEWAY_S3_ENDPOINT: "http://rgw:7480",
          FENCED_GATEWAY_S3_ACCESS_KEY_ID: "id",
          FENCED_GATEWAY_S3_SECRET_ACCESS_KEY: "s",
        },
      ),
    ).toThrow(/s3\.bucket is missing: .*FENCED_GATEWAY_S3_ENDPOINT.* need FENCED_GATEWAY_S3_BUCKET \(or --s3-bucket/);
    expect(() => loadConfig({ postgresSchema: "x" }, env)).toThrow(
      /postgres\.url is missing: --postgres-schema is set, which needs FENCED_GATEWAY_POSTGRES_URL/,
    );
    expect(
      loadConfig({ storeTimeoutMs: "750", adminPort: "9090", startChecks: false }, { ...env, FENCED_GATEWAY_MAX_CONNECTIONS: "10" }),
    ).toMatchObject({
      storeTimeoutMs: 750,
      admin: { host: "127.0.0.1", port: 9090 },
      startChecks: false,
      maxConnections: 10,
      headersTimeoutMs: 10_000,
    });
    expect(loadConfig({}, { ...env, FENCED_GATEWAY_START_CHECKS: "false" }).startChecks).toBe(false);
    expect(() => loadConfig({ headersTimeoutMs: "5000", requestTimeoutMs: "1000" }, env)).toThrow(/headersTimeoutMs/);
    expect(() => loadConfig({ port: "8080", adminPort: "8080" }, env)).toThrow(
      /^admin\.port: the admin listener needs an address of its own .*\(from --admin-port\)$/,
    );
  });

  it("names every bad field", () => {
    expect(() => loadConfig({ port: "http" }, { FENCED_GATEWAY_API_KEYS: "[]" })).toThrow(/port[\s\S]*apiKeys|apiKeys[\s\S]*port/);
    expect(() => loadConfig({}, { FENCED_GATEWAY_API_KEYS: "not json" })).toThrow(/FENCED_GATEWAY_API_KEYS/);
  });
});
