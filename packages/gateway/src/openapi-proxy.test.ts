// The API document as standard tooling reads it: Prism (@stoplight/prism-cli), a validating proxy
// built from the document alone, stands in front of a real gateway (PostgreSQL and radosgw) and, with
// --errors, refuses any request or answer the document does not describe. Keys with '/' must reach
// records and objects through it, each path built from the document's own template the way OpenAPI
// clients fill a path parameter (encodeURIComponent: '/' as %2F); the slashes as they are, which the
// gateway also takes, name the same key.
import { readFileSync } from "node:fs";
import { request } from "node:http";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort, killHard, spawnTracked, waitFor, type Spawned } from "@fenced/servers";
import { openApiDocument, type OpenApiDocument } from "./openapi/document.js";
import type { ResponseObject } from "./openapi/types.js";
import { resolve } from "./openapi-test-support.js";
import { bearer, httpClient, KEYS, useGateway, writeHeaders, type Answer, type HttpClient } from "./test-support.js";

const fx = useGateway({ postgres: true, s3: true });

// Prism's entry point (its package's bin, a root devDependency), run on this Node.
const prismPackage = createRequire(join(process.cwd(), "package.json")).resolve("@stoplight/prism-cli/package.json");
const PRISM = join(dirname(prismPackage), (JSON.parse(readFileSync(prismPackage, "utf8")) as { bin: { prism: string } }).bin.prism);

let prism: Spawned | undefined;
let prismPort: number;
/** Through Prism; every answer is also checked against the document (test-support's checker). */
let proxy: HttpClient;
let served: OpenApiDocument;

beforeAll(async () => {
  const gateway = `http://127.0.0.1:${fx.gw.serving.port}`;
  prismPort = await freePort();
  // The document Prism reads is the one this gateway serves.
  const args = ["proxy", `${gateway}/openapi.json`, gateway, "--errors", "--host", "127.0.0.1", "--port", String(prismPort)];
  prism = spawnTracked(process.execPath, [PRISM, ...args]);
  const output = (): string => prism?.output() ?? "";
  await waitFor("Prism to listen", () => Promise.resolve(output().includes("Prism is listening")), 60_000, output);
  proxy = httpClient(prismPort);
  served = (await fx.gw.client.send({ method: "GET", path: "/openapi.json" })).json<OpenApiDocument>();
}, 90_000);

afterAll(async () => {
  proxy?.close();
  if (prism !== undefined) await killHard(prism);
});

/** A path from one of the document's templates, its parameter filled as OpenAPI clients fill it. */
function pathOf(template: string, value: string): string {
  expect(Object.keys(served.paths)).toContain(template);
  return template.replace(/\{[^}]+\}/, encodeURIComponent(value));
}

/** The same value with its slashes as they are: each segment encoded, '/' left between them. */
const withSlashes = (prefix: string, value: string): string => `${prefix}/${value.split("/").map(encodeURIComponent).join("/")}`;

const JSON_TYPE = { "content-type": "application/json" };

/** The status and body of an answer, Prism's own refusals (problem+json naming the violation) included. */
const said = (answer: Answer): string => `${answer.status} ${answer.text()}`;

describe("through Prism, a validating proxy built from the document", () => {
  it.each([
    ["records", "application/json", '{"a":[1,[2,{"b":null}]]}'],
    ["objects", "text/plain", "bytes under a/b"],
  ])("a key with '/' reaches %s as one path segment ('/' percent-encoded), the key its slashes name", async (store, type, body) => {
    const key = `prism/${store}/a b/ü/c`;
    const path = pathOf(`/v1/${store}/{key}`, key);

    const put = await proxy.send({ method: "PUT", path, headers: { ...writeHeaders(KEYS.admin, 1n), "content-type": type }, body });
    expect(put.status, said(put)).toBe(200);
    const got = await proxy.send({ method: "GET", path, headers: bearer(KEYS.admin) });
    expect(got.status, said(got)).toBe(200);
    expect(got.text()).toBe(body);

    // With its slashes as they are, straight to the gateway (a proxy matches a template's parameter to one segment).
    const direct = await fx.gw.client.send({ method: "GET", path: withSlashes(`/v1/${store}`, key), headers: bearer(KEYS.admin) });
    expect(direct.status, direct.text()).toBe(200);
    expect(direct.text()).toBe(body);
    expect(direct.headers.etag).toBe(got.headers.etag);

    const removed = await proxy.send({ method: "DELETE", path, headers: writeHeaders(KEYS.admin, 1n) });
    expect(removed.status, said(removed)).toBe(204);
    const gone = await fx.gw.client.send({ method: "GET", path: withSlashes(`/v1/${store}`, key), headers: bearer(KEYS.admin) });
    expect(gone.status).toBe(404);
  });

  it("HEAD of an object with '/' in its key: the headers GET would send, and no body", async () => {
    const key = "prism/objects/head/x";
    const path = pathOf("/v1/objects/{key}", key);
    const put = await proxy.send({
      method: "PUT",
      path,
      headers: { ...writeHeaders(KEYS.admin, 1n), "content-type": "text/plain" },
      body: "x",
    });
    expect(put.status, said(put)).toBe(200);
    const head = await proxy.send({ method: "HEAD", path, headers: bearer(KEYS.admin) });
    expect(head.status, said(head)).toBe(200);
    expect(head.headers.etag).toBe(put.headers.etag);
    expect(head.headers["fencing-token"]).toBe("1");
    expect(head.body.length).toBe(0);
  });

  it("a resource with '/' reaches its fences as one %2F-encoded segment", async () => {
    const resource = "prism/fences/a b/ü";
    const put = await proxy.send({
      method: "PUT",
      path: pathOf("/v1/records/{key}", resource),
      headers: { ...writeHeaders(KEYS.admin, 7n), ...JSON_TYPE },
      body: "1",
    });
    expect(put.status, said(put)).toBe(200);
    const got = await proxy.send({ method: "GET", path: pathOf("/v1/fences/{resource}", resource), headers: bearer(KEYS.admin) });
    expect(got.status, said(got)).toBe(200);
    expect(got.json()).toMatchObject({ resource, stores: { postgres: { token: "7" } } });
  });

  it("refuses, itself, a request the document does not allow: the proxy validates", async () => {
    // A token that is not a decimal string: the document's Fencing-Token pattern, checked by Prism before the gateway sees it.
    const path = pathOf("/v1/records/{key}", "prism/records/refused");
    const answer = await new Promise<{ status: number; body: string }>((done, fail) => {
      const req = request({ host: "127.0.0.1", port: prismPort, method: "PUT", path, headers: writeHeaders(KEYS.admin, "x1") }, (res) => {
        let body = "";
        res.on("data", (c: Buffer) => (body += c.toString("utf8")));
        res.on("end", () => done({ status: res.statusCode ?? 0, body }));
      });
      req.on("error", fail);
      req.end("1");
    });
    // 422: Prism's own answer (the gateway answers a malformed token 400).
    expect(answer.status, answer.body).toBe(422);
    expect(answer.body).toContain("fencing-token");
    expect(await fx.gw.gateway.records?.get("prism/records/refused")).toBeUndefined();
  });

  // Prism's proxy reads the body of every answer whose Content-Type is JSON as JSON, HEAD's (which has
  // none) included (@stoplight/prism-http, utils/parseResponse.js: only a 204 is spared), and answers
  // 500 instead. The gateway sends a HEAD the Content-Type GET would have (RFC 9110 §9.3.2): a record's
  // application/json, a refusal's application/problem+json. So these do not pass through Prism yet.
  it.fails.each([
    { what: "a record", store: "records", written: true, status: 200 },
    { what: "a refusal", store: "objects", written: false, status: 404 },
  ])("HEAD answers typed JSON ($what) pass through Prism", async ({ store, written, status }) => {
    const path = pathOf(`/v1/${store}/{key}`, `prism/${store}/head-json/x`);
    if (written) await fx.gw.client.send({ method: "PUT", path, headers: { ...writeHeaders(KEYS.admin, 1n), ...JSON_TYPE }, body: "1" });
    const head = await proxy.send({ method: "HEAD", path, headers: bearer(KEYS.admin) });
    expect(head.status, said(head)).toBe(status);
  });
});

describe("the document's HEAD operations", () => {
  it("declare headers only, refusals included: a HEAD answer has no body", () => {
    const document = openApiDocument();
    const heads = Object.entries(document.paths).flatMap(([template, item]) =>
      item.head === undefined ? [] : [{ template, op: item.head }],
    );
    expect(heads.map((h) => h.template)).toEqual(["/v1/fences/{resource}", "/v1/records/{key}", "/v1/objects/{key}"]);
    for (const { template, op } of heads) {
      for (const [status, response] of Object.entries(op.responses)) {
        expect(resolve<ResponseObject>(document, response).content, `HEAD ${template} ${status}`).toBeUndefined();
      }
    }
  });
});
