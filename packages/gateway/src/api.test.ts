import { createHash } from "node:crypto";
import { request as httpRequest } from "node:http";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listKeys } from "@fenced/servers";
import { API_KEYS, bearer, KEYS, runGateway, startBackends, writeHeaders, type Backends, type RunningGateway } from "./test-support.js";

/** The records and objects API over real HTTP, against real Postgres and S3; and who may call it. */
let backends: Backends;
let gw: RunningGateway;
let prefix: string;
const HASHED = "hashed-key-0123456789abcdef";

beforeAll(async () => {
  backends = await startBackends({ postgres: true, s3: true });
  const options = backends.gatewayOptions({
    // A key given only as its SHA-256 (how a config file need not hold the secret).
    apiKeys: [
      ...API_KEYS,
      { id: "hashed", sha256: createHash("sha256").update(HASHED).digest("hex"), resources: ["h/"], keys: ["h/"], trustedLockClient: true },
    ],
    limits: { objectBytes: 1024 * 1024 },
  });
  prefix = options.objects?.prefix ?? "";
  gw = await runGateway(options);
});
afterAll(async () => {
  await gw?.close();
  await backends?.stop();
});

const json = { "content-type": "application/json" };

describe("records", () => {
  it("put, get, conditional put (If-Match), delete; versions travel as ETags, tokens as headers", async () => {
    const c = gw.client;
    const put = await c.send({
      method: "PUT",
      path: "/v1/records/docs/a",
      headers: { ...writeHeaders(KEYS.admin, 5n), ...json },
      body: '{"n":1}',
    });
    expect(put.status, put.text()).toBe(200);
    const { version, token } = put.json<{ version: string; token: string }>();
    expect(token).toBe("5");
    expect(put.headers.etag).toBe(`"${version}"`);

    const got = await c.send({ method: "GET", path: "/v1/records/docs/a", headers: bearer(KEYS.admin) });
    expect(got.json()).toEqual({ n: 1 });
    expect(got.headers).toMatchObject({ etag: `"${version}"`, "fencing-token": "5", "fencing-resource": "docs/a" });

    const cas = await c.send({
      method: "PUT",
      path: "/v1/records/docs/a",
      headers: { ...writeHeaders(KEYS.admin, 5n, { "if-match": `"${version}"` }), ...json },
      body: '{"n":2}',
    });
    expect(cas.status).toBe(200);
    const stale = await c.send({
      method: "PUT",
      path: "/v1/records/docs/a",
      headers: { ...writeHeaders(KEYS.admin, 6n, { "if-match": `"${version}"` }), ...json },
      body: '{"n":3}',
    });
    expect(stale.status).toBe(412);
    expect(stale.json()).toMatchObject({
      type: "/problems/version-mismatch",
      expected: version,
      actual: cas.json<{ version: string }>().version,
    });
    // A refused conditional write leaves the ratchet where it was: 5 still writes.
    expect(
      (await c.send({ method: "PUT", path: "/v1/records/docs/a", headers: { ...writeHeaders(KEYS.admin, 5n), ...json }, body: '"five"' }))
        .status,
    ).toBe(200);

    const del = await c.send({ method: "DELETE", path: "/v1/records/docs/a", headers: writeHeaders(KEYS.admin, 7n) });
    expect(del.status).toBe(204);
    expect(del.headers.etag).toMatch(/^"[0-9]+"$/);
    expect(del.headers["fencing-token"]).toBe("7");
    const gone = await c.send({ method: "GET", path: "/v1/records/docs/a", headers: bearer(KEYS.admin) });
    expect(gone.status).toBe(404);
    expect(gone.json()).toMatchObject({ type: "/problems/not-found", status: 404 });
    const older = await c.send({
      method: "PUT",
      path: "/v1/records/docs/a",
      headers: { ...writeHeaders(KEYS.admin, 6n), ...json },
      body: "1",
    });
    expect(older.status).toBe(409);
  });

  it("stores every JSON value as it came (scalars, null, arrays, unicode), with Fencing-Resource percent-encoded", async () => {
    for (const [i, value] of [null, 0, -1.5, "text", true, [1, [2, { a: "ü" }]], { "naïve key": "日本" }].entries()) {
      const put = await gw.client.send({
        method: "PUT",
        path: `/v1/records/values/${i}`,
        headers: { ...writeHeaders(KEYS.admin, 1n, { "fencing-resource": "values/%C3%BC%20x" }), ...json },
        body: JSON.stringify(value),
      });
      expect(put.status, put.text()).toBe(200);
      const got = await gw.client.send({ method: "GET", path: `/v1/records/values/${i}`, headers: bearer(KEYS.admin) });
      expect(got.json()).toEqual(value);
      expect(got.headers["fencing-resource"]).toBe("values/%C3%BC%20x");
      expect((await gw.gateway.records?.get(`values/${i}`))?.resource).toBe("values/ü x");
    }
  });

  it("keys are percent-decoded once: '%2F' is a '/', and '%252F' is a literal '%2F'", async () => {
    const put = await gw.client.send({
      method: "PUT",
      path: "/v1/records/enc%2Fa%20b/c%252Fd",
      headers: { ...writeHeaders(KEYS.admin, 1n), ...json },
      body: "1",
    });
    expect(put.status, put.text()).toBe(200);
    expect(await gw.gateway.records?.get("enc/a b/c%2Fd")).toMatchObject({ value: 1, resource: "enc/a b/c%2Fd" });
    expect((await gw.client.send({ method: "GET", path: "/v1/records/enc/a%20b/c%252Fd", headers: bearer(KEYS.admin) })).status).toBe(200);
  });
});

describe("objects", () => {
  const bytes = (n: number, seed: number): Buffer => Buffer.from(Array.from({ length: n }, (_, i) => (i * 31 + seed) % 251));

  it("a body of known length within the S3 store's inlineLimit, above the gateway's 64 KiB default, is kept inside its manifest", async () => {
    // Read whole only up to the store's limit (StoreDefinition.bodyLimits): a body the gateway streamed
    // instead would reach the store as a stream of unknown size, and land in a data object of its own.
    const { objects, ...others } = backends.gatewayOptions({ limits: { objectBytes: 1024 * 1024 } });
    if (objects === undefined) throw new Error("the backends serve objects");
    const wide = await runGateway({ ...others, objects: { ...objects, inlineLimit: 128 * 1024 } });
    try {
      const body = bytes(96 * 1024, 5);
      const put = await wide.client.send({
        method: "PUT",
        path: "/v1/objects/inline/wide",
        headers: { ...writeHeaders(KEYS.admin, 10n), "content-type": "application/octet-stream" },
        body,
      });
      expect(put.status, put.text()).toBe(200);
      const own = objects.prefix ?? "";
      const keys = await listKeys(backends.s3Client as NonNullable<Backends["s3Client"]>, backends.bucket ?? "", own);
      expect(keys.filter((k) => k.includes("inline/wide"))).toEqual([`${own}manifests/inline/wide`]);
      const got = await wide.client.send({ method: "GET", path: "/v1/objects/inline/wide", headers: bearer(KEYS.admin) });
      expect(got.body.equals(body)).toBe(true);
    } finally {
      await wide.close();
    }
  });

  it.each([
    { kind: "inline (small, known length)", size: 100, chunked: false },
    { kind: "streamed (known length)", size: 300 * 1024, chunked: false },
    { kind: "multipart (chunked, unknown length)", size: 700 * 1024, chunked: true },
  ])("$kind: put, get with its type and length, head, delete (a tombstone that keeps the ratchet)", async ({ size, chunked }) => {
    const key = `blobs/${size}`;
    const body = bytes(size, 3);
    const put = await gw.client.send({
      method: "PUT",
      path: `/v1/objects/${key}`,
      headers: { ...writeHeaders(KEYS.admin, 10n), "content-type": "image/png", ...(chunked ? { "transfer-encoding": "chunked" } : {}) },
      body: chunked ? Readable.from([body.subarray(0, 1000), body.subarray(1000)]) : body,
    });
    expect(put.status, put.text()).toBe(200);
    const got = await gw.client.send({ method: "GET", path: `/v1/objects/${key}`, headers: bearer(KEYS.admin) });
    expect(got.status).toBe(200);
    expect(got.body.equals(body)).toBe(true);
    expect(got.headers).toMatchObject({
      "content-type": "image/png",
      "content-length": String(size),
      "fencing-token": "10",
      etag: put.headers.etag,
    });
    const head = await gw.client.send({ method: "HEAD", path: `/v1/objects/${key}`, headers: bearer(KEYS.admin) });
    expect(head.status).toBe(200);
    expect(head.headers["content-length"]).toBe(String(size));
    expect(head.body.length).toBe(0);

    expect((await gw.client.send({ method: "DELETE", path: `/v1/objects/${key}`, headers: writeHeaders(KEYS.admin, 11n) })).status).toBe(
      204,
    );
    expect((await gw.client.send({ method: "GET", path: `/v1/objects/${key}`, headers: bearer(KEYS.admin) })).status).toBe(404);
    const resurrect = await gw.client.send({
      method: "PUT",
      path: `/v1/objects/${key}`,
      headers: writeHeaders(KEYS.admin, 10n),
      body: "old",
    });
    expect(resurrect.status).toBe(409);
    expect(resurrect.json()).toMatchObject({ highest: "11" });
  });

  it("a chunked body over the limit is cut off with 413 and leaves no manifest and no data object", async () => {
    function* endless(): Generator<Buffer> {
      for (let i = 0; i < 40; i++) yield Buffer.alloc(64 * 1024, i);
    }
    const res = await gw.client.send({
      method: "PUT",
      path: "/v1/objects/big/endless",
      headers: { ...writeHeaders(KEYS.admin, 1n), "transfer-encoding": "chunked" },
      body: Readable.from(endless()),
    });
    expect(res.status).toBe(413);
    expect(res.json()).toMatchObject({ type: "/problems/too-large" });
    const left = await listKeys(backends.s3Client as NonNullable<Backends["s3Client"]>, backends.bucket ?? "", prefix);
    expect(left.filter((k) => k.includes("big/endless") && !k.includes("/fences/"))).toEqual([]);
  });

  it("with Expect: 100-continue, a stale writer is refused before it sends a byte of its body", async () => {
    await gw.client.send({ method: "PUT", path: "/v1/objects/expect/x", headers: writeHeaders(KEYS.admin, 50n), body: "from 50" });
    const attempt = (token: bigint, expectation = "100-continue"): Promise<{ status: number; continued: boolean }> =>
      new Promise((resolve, reject) => {
        let continued = false;
        const req = httpRequest(
          {
            port: gw.serving.port,
            host: "127.0.0.1",
            method: "PUT",
            path: "/v1/objects/expect/x",
            headers: { ...writeHeaders(KEYS.admin, token), expect: expectation, "content-length": 200_000 },
          },
          (res) => {
            res.resume();
            res.on("end", () => resolve({ status: res.statusCode ?? 0, continued }));
          },
        );
        req.on("continue", () => {
          continued = true;
          req.end(Buffer.alloc(200_000, 1));
        });
        req.on("error", reject);
        req.flushHeaders();
      });
    expect(await attempt(49n)).toEqual({ status: 409, continued: false });
    expect(await attempt(51n)).toEqual({ status: 200, continued: true });
    // Node's own reading of the header (100-continue among other expectations) is the one the routes keep.
    expect(await attempt(52n, "100-Continue, x-other")).toEqual({ status: 200, continued: true });
  });
});

describe("API keys", () => {
  const put = (key: string | undefined, path: string, extra: Record<string, string> = {}) =>
    gw.client.send({
      method: "PUT",
      path,
      headers: { ...(key === undefined ? {} : bearer(key)), "fencing-token": "1", ...json, ...extra },
      body: "1",
    });

  it("401 without a key or with a wrong one, with a WWW-Authenticate challenge", async () => {
    const missing = await put(undefined, "/v1/records/team-a/x");
    expect(missing.status).toBe(401);
    expect(missing.headers["www-authenticate"]).toBe('Bearer realm="fenced-gateway"');
    for (const wrong of [`${KEYS.teamA}x`, KEYS.teamA.slice(0, -1), KEYS.teamA.toUpperCase(), HASHED.replace("h", "H")]) {
      const res = await put(wrong, "/v1/records/team-a/x");
      expect(res.status).toBe(401);
      expect(res.headers["www-authenticate"]).toContain('error="invalid_token"');
    }
    expect(
      (await gw.client.send({ method: "GET", path: "/v1/records/team-a/x", headers: { authorization: `Basic ${KEYS.admin}` } })).status,
    ).toBe(401);
  });

  it("403 outside the key's key and resource prefixes, for reads, writes and leases alike", async () => {
    expect((await put(KEYS.teamA, "/v1/records/team-a/x")).status).toBe(200);
    expect((await put(KEYS.teamA, "/v1/records/team-b/x")).status).toBe(403);
    expect((await put(KEYS.teamA, "/v1/records/team-a/y", { "fencing-resource": "team-b/y" })).status).toBe(403);
    expect((await gw.client.send({ method: "GET", path: "/v1/records/team-b/x", headers: bearer(KEYS.teamA) })).status).toBe(403);
    expect((await gw.client.send({ method: "GET", path: "/v1/objects/other", headers: bearer(KEYS.teamA) })).status).toBe(403);
    expect((await put(HASHED, "/v1/records/h/1")).status).toBe(200);
    expect((await put(HASHED, "/v1/records/team-a/1")).status).toBe(403);
    // Read-only keys read, and nothing else.
    expect((await gw.client.send({ method: "GET", path: "/v1/records/team-a/x", headers: bearer(KEYS.reader) })).status).toBe(200);
    const readerWrite = await put(KEYS.reader, "/v1/records/team-a/x");
    expect(readerWrite.status).toBe(403);
    expect(readerWrite.json()).toMatchObject({ type: "/problems/forbidden" });
    // This gateway has no lock: the lease routes are absent, whoever asks.
    expect((await gw.client.json("POST", "/v1/leases", { resource: "team-a/l", ttlMs: 100 }, bearer(KEYS.teamA))).status).toBe(404);
  });
});
