// Generators of hostile requests for fuzz.test.ts (not part of the published build).
import { randomBytes } from "node:crypto";
import fc from "fast-check";
import { MAX_TOKEN } from "@fenced/fence";
import { TOKEN_PATTERN } from "@fenced/fence/internal";
import { encodeLeaseId } from "./auth/lease-id.js";
import { KEYS } from "./test-support.js";

export interface Spec {
  store: "records" | "objects";
  method: string;
  /** The key as it appears in the path (already percent-encoded, or deliberately not). */
  keyPath: string;
  /** Replaces the whole path when set (unknown routes). */
  path?: string;
  headers: Record<string, string | string[]>;
  body?: string | Buffer;
}

export interface Defect {
  readonly name: string;
  readonly status: number;
  apply(spec: Spec): void;
}

export interface BadRequest {
  readonly what: string;
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string | string[]>;
  readonly body: string | Buffer | undefined;
  /** Statuses this request may get: exactly one for a single defect, one per defect for a mix. */
  readonly expect: readonly number[];
}

/** The limits the fuzzed gateway runs with. */
export const FUZZ_LIMITS = { recordBytes: 4096, objectBytes: 16 * 1024, inlineLimit: 1024 } as const;
export const RATCHETED = "fuzz/ratcheted";

const ascii = fc.string({ unit: "grapheme-ascii", maxLength: 40 });
const segment = fc.stringMatching(/^[a-z0-9_-]{1,12}$/);
const goodKey = fc.array(segment, { minLength: 1, maxLength: 3 }).map((s) => `fuzz/${s.join("/")}`);
const goodToken = fc.bigInt({ min: 1n, max: MAX_TOKEN - 1n }).map(String);

const validToken = (v: string): boolean => TOKEN_PATTERN.test(v) && BigInt(v) <= MAX_TOKEN;

const malformedToken: fc.Arbitrary<string> = fc
  .oneof(
    fc.bigInt({ min: -(2n ** 70n), max: -1n }).map(String),
    fc.bigInt({ min: MAX_TOKEN + 1n, max: 10n ** 40n }).map(String),
    fc.bigInt({ min: 0n, max: MAX_TOKEN }).map((t) => `0${t}`),
    fc.double().map(String),
    fc.constantFrom(
      "",
      "+1",
      "-0",
      "0x10",
      "1e3",
      "1_000",
      "¹²",
      "½",
      "1,2",
      "0.0",
      "true",
      "null",
      "[1]",
      '"1"',
      "33n",
      "9223372036854775808",
    ),
    ascii,
  )
  // Node trims a header value's surrounding whitespace: " 5" arrives as "5", a valid token.
  .filter((v) => !validToken(v.trim()));

const pct = (code: number): string => `%${code.toString(16).toUpperCase().padStart(2, "0")}`;

const badKeyPath: fc.Arbitrary<string> = fc.oneof(
  fc
    .tuple(
      fc.array(segment, { maxLength: 2 }),
      fc.constantFrom("..", ".", "%2e%2e", "%2E", ".%2e", "%2e.", "%2E%2E"),
      fc.array(segment, { maxLength: 2 }),
    )
    .map(([a, dots, b]) => [...a, dots, ...b].join("/")),
  goodKey.map((k) => `/${k}`),
  goodKey.map((k) => `${k}/`),
  fc.tuple(goodKey, segment).map(([a, b]) => `${a}//${b}`),
  fc.tuple(goodKey, fc.constantFrom("%2F%2F", "%2F/", "/%2F")).map(([a, s]) => `${a}${s}x`),
  goodKey.map((k) => `%2F${k}`),
  fc
    .tuple(
      goodKey,
      fc.oneof(
        fc.integer({ min: 0, max: 0x1f }).map(pct),
        fc.constant("%7F"),
        fc.integer({ min: 0x80, max: 0x9f }).map((c) => `%C2${pct(c)}`),
      ),
      segment,
    )
    .map(([a, c, b]) => `${a}${c}${b}`),
  fc
    .tuple(goodKey, fc.constantFrom("%", "%z", "%zz", "%C3", "%E0%A4", "%ED%A0%80", "%FF", "%C0%AF", "%%", "%u0041"))
    .map(([a, bad]) => `${a}${bad}`),
  fc.integer({ min: 513, max: 700 }).map((n) => "k".repeat(n)),
  fc.integer({ min: 257, max: 300 }).map((n) => "%C3%A9".repeat(n)),
  fc.constant(""),
);

const badResource = fc.oneof(
  fc.constantFrom("%zz", "%", "%00", "%0a", "%1F", "%7F", "%C2%85", "", "%ED%A0%80", "%C3"),
  fc.integer({ min: 513, max: 600 }).map((n) => "r".repeat(n)),
);

const auth = (key: string): string => `Bearer ${key}`;

const unauthorized = fc.oneof(
  fc.constant(undefined),
  fc.stringMatching(/^[A-Za-z0-9._~+/-]{16,64}$/).map(auth),
  fc.constant(`Basic ${Buffer.from(`admin:${KEYS.admin}`).toString("base64")}`),
  fc
    .integer({ min: 0, max: KEYS.admin.length - 1 })
    .map((i) => auth(KEYS.admin.slice(0, i) + (KEYS.admin[i] === "x" ? "y" : "x") + KEYS.admin.slice(i + 1))),
  fc.constantFrom(
    auth(`${KEYS.admin}=`),
    `Token ${KEYS.admin}`,
    "Bearer",
    auth(KEYS.admin.toUpperCase()),
    auth(KEYS.admin.slice(1)),
    KEYS.admin,
  ),
  ascii.filter((s) => s.trim() !== "" && !s.includes(KEYS.admin)),
);

const setAuth = (value: string | undefined) => (s: Spec) => {
  if (value === undefined) delete s.headers.authorization;
  else s.headers.authorization = value;
};

const defect = (name: string, status: number, apply: (s: Spec) => void): Defect => ({ name, status, apply });

/** Every way a write can be wrong, each on its own enough for the gateway to refuse it without writing. */
const storeDefect: fc.Arbitrary<Defect> = fc.oneof(
  unauthorized.map((v) => defect(`auth ${JSON.stringify(v)}`, 401, setAuth(v))),
  fc.constant(defect("team-a key, key outside its scope", 403, setAuth(auth(KEYS.teamA)))),
  segment.map((k) =>
    defect("team-a key, resource outside its scope", 403, (s) => {
      s.headers.authorization = auth(KEYS.teamA);
      s.keyPath = `team-a/${k}`;
      s.headers["fencing-resource"] = `fuzz/${k}`;
    }),
  ),
  fc.constant(defect("read-only key writes", 403, setAuth(auth(KEYS.reader)))),
  malformedToken.map((t) => defect(`token ${JSON.stringify(t)}`, 400, (s) => void (s.headers["fencing-token"] = t))),
  fc.tuple(goodToken, goodToken).map((t) => defect(`two tokens ${t.join(",")}`, 400, (s) => void (s.headers["fencing-token"] = t))),
  fc.constant(defect("no token", 400, (s) => void delete s.headers["fencing-token"])),
  badKeyPath.map((k) => defect(`key ${JSON.stringify(k)}`, 400, (s) => void (s.keyPath = k))),
  badResource.map((r) => defect(`resource ${JSON.stringify(r.slice(0, 40))}`, 400, (s) => void (s.headers["fencing-resource"] = r))),
  fc
    .constantFrom("*", '"a", "b"', 'W/"1"', '"not a version"', "abc", '""', "12 34")
    .map((v) => defect(`If-Match ${v}`, 400, (s) => void (s.headers["if-match"] = v))),
  fc
    .constantFrom(["if-none-match", "*"], ["if-unmodified-since", "Tue, 01 Jan 2030 00:00:00 GMT"])
    .map(([h, v]) => defect(`${h} on a write`, 400, (s) => void (s.headers[h as string] = v as string))),
  fc.bigInt({ min: 0n, max: MAX_TOKEN - 1n }).map((t) =>
    defect(`stale token ${t}`, 409, (s) => {
      s.headers["fencing-resource"] = RATCHETED;
      s.headers["fencing-token"] = t.toString();
    }),
  ),
  fc.oneof(fc.bigInt({ min: 10n ** 15n, max: MAX_TOKEN }).map(String), fc.stringMatching(/^[0-9a-f]{32}$/)).map((v) =>
    defect(`If-Match ${v} that is not the current version`, 412, (s) => {
      s.headers["fencing-resource"] = RATCHETED;
      s.headers["fencing-token"] = MAX_TOKEN.toString();
      // Each store issues its own version format; the other one's would be a 400.
      s.headers["if-match"] =
        `"${s.store === "records" ? (/^\d+$/.test(v) ? v : "999999999999999") : /^[0-9a-f]{32}$/.test(v) ? v : "f".repeat(32)}"`;
    }),
  ),
  fc.constantFrom("POST", "PATCH", "OPTIONS").map((m) => defect(`method ${m}`, 405, (s) => void (s.method = m))),
  segment.map((k) => defect("read a key that does not exist", 404, (s) => ((s.method = "GET"), (s.keyPath = `fuzz/absent/${k}`)))),
  fc
    .constantFrom("/v2/records/x", "/v1/recordz/x", "/V1/records/x", "/v1", "/", "/v1/RECORDS/x", "/healthz/x", "/v1/records-x")
    .map((p) => defect(`route ${p}`, 404, (s) => void (s.path = p))),
  // Body defects force PUT: on a DELETE the body is not read, and the write would go through.
  fc
    .constantFrom(
      undefined,
      "text/plain",
      "application/xml",
      "application/x-www-form-urlencoded",
      "multipart/form-data; boundary=x",
      "application/json-patch+json",
      "text/json",
      "application/json; charset=latin1",
      "x-garbage",
    )
    .map((t) =>
      defect(`content type ${String(t)}`, 415, (s) => {
        s.method = "PUT";
        if (s.store === "objects") s.headers["content-encoding"] = "gzip";
        else if (t === undefined) delete s.headers["content-type"];
        else s.headers["content-type"] = t;
      }),
    ),
  fc
    .oneof(
      fc.constantFrom(
        "{",
        "[1,",
        "{'a':1}",
        "undefined",
        "NaN",
        '{"a":1}}',
        '"\\u0000"',
        '{"k\\u0000":1}',
        '"\\ud800"',
        "[".repeat(300) + "]".repeat(300),
        "\u0000",
      ),
      ascii.filter((s) => {
        try {
          JSON.parse(s);
          return false;
        } catch {
          return true;
        }
      }),
    )
    .map((b) =>
      defect(`body ${JSON.stringify(b.slice(0, 30))}`, 400, (s) => {
        s.method = "PUT";
        if (s.store === "objects") s.headers["content-type"] = "a".repeat(257);
        else s.body = b;
      }),
    ),
  fc.constant(
    defect("empty body", 400, (s) => {
      s.method = "PUT";
      // An empty object is a valid object; its defect is a Content-Type no store accepts.
      if (s.store === "records") s.body = "";
      else s.headers["content-type"] = "a".repeat(300);
    }),
  ),
  fc.integer({ min: 1, max: 20_000 }).map((extra) =>
    defect(`body ${extra} bytes over the limit`, 413, (s) => {
      s.method = "PUT";
      s.body =
        s.store === "records"
          ? JSON.stringify({ x: "a".repeat(FUZZ_LIMITS.recordBytes + extra) })
          : Buffer.alloc(FUZZ_LIMITS.objectBytes + extra, 7);
    }),
  ),
);

/** A write that would be accepted: every generated request gets at least one defect on top. */
const baseSpec: fc.Arbitrary<Spec> = fc
  .record({
    store: fc.constantFrom("records" as const, "objects" as const),
    method: fc.constantFrom("PUT", "DELETE"),
    key: goodKey,
    token: goodToken,
  })
  .map(({ store, method, key, token }) => ({
    store,
    method,
    keyPath: key,
    headers: {
      authorization: auth(KEYS.admin),
      "fencing-token": token,
      "content-type": store === "records" ? "application/json" : "application/octet-stream",
    },
    body: store === "records" ? '{"written":true}' : Buffer.from("written"),
  }));

function toRequest(spec: Spec, defects: readonly Defect[]): BadRequest {
  const body = spec.method === "GET" ? undefined : spec.body;
  const headers = { ...spec.headers };
  if (spec.body === "" && body !== undefined) headers["content-length"] = "0";
  return described({
    what: defects.map((d) => d.name).join(" + "),
    method: spec.method,
    path: spec.path ?? `/v1/${spec.store}/${spec.keyPath}`,
    headers,
    body,
    expect: [...new Set(defects.map((d) => d.status))],
  });
}

/** How fast-check prints a counterexample: what is wrong with it, not its (possibly 20 kB) body. */
function described(r: BadRequest): BadRequest {
  return Object.assign(r, { [fc.toStringMethod]: () => `${r.what} (${r.method} ${r.path.slice(0, 100)})` });
}

export const storeRequest = (defects: { minLength: number; maxLength: number }): fc.Arbitrary<BadRequest> =>
  fc.tuple(baseSpec, fc.array(storeDefect, defects)).map(([base, ds]) => {
    // A copy: fast-check replays generated values while shrinking, so they must never be mutated.
    const spec = { ...base, headers: { ...base.headers } };
    for (const d of ds) d.apply(spec);
    return toRequest(spec, ds);
  });

const leaseBody = fc.oneof(
  fc.record({
    resource: fc.oneof(
      fc.constantFrom("", "\u0000", "a\nb", "\u007f", "\u0085", "\ud800", "x\udc00", "r".repeat(513)),
      fc.integer(),
      fc.constant(null),
    ),
    ttlMs: fc.constant(1000),
  }),
  fc.record({
    resource: fc.constant("fuzz/lease"),
    ttlMs: fc.oneof(fc.constantFrom(0, -1, 1.5, 3_600_001, 2 ** 31, Number.MAX_SAFE_INTEGER), fc.string(), fc.constant(null)),
  }),
  fc.constantFrom({ resource: "fuzz/lease" }, { ttlMs: 1000 }, {}, [], "x", 7, null, true),
  // Tokens never travel as JSON numbers, and a lease request carries none at all.
  fc
    .oneof(fc.integer(), fc.bigInt({ min: 0n, max: MAX_TOKEN }).map(String))
    .map((token) => ({ resource: "fuzz/lease", ttlMs: 1000, token })),
);

const leaseIdGarbage = fc.oneof(
  ascii,
  fc.tuple(malformedToken, fc.stringMatching(/^[0-9a-f]{32}$/)).map(([t, v]) => `${t}.${v}.ZnV6eg`),
  fc.stringMatching(/^[0-9a-f]{31}$/).map((v) => `1.${v}.ZnV6eg`),
  fc.stringMatching(/^[0-9A-F]{32}$/).map((v) => `1.${v}.ZnV6eg`),
  fc.constantFrom(
    "1.00000000000000000000000000000000.ZnV6eg==",
    "1.00000000000000000000000000000000.ZnV6eh",
    "1.00000000000000000000000000000000.",
    "1.00000000000000000000000000000000.wA",
    "01.00000000000000000000000000000000.ZnV6eg",
  ),
);

const json = (body: unknown): string => JSON.stringify(body);
const lease = (what: string, status: number, method: string, path: string, headers: Record<string, string>, body?: string): BadRequest =>
  described({ what, method, path, headers, body, expect: [status] });
const admin = { authorization: auth(KEYS.admin), "content-type": "application/json" };

/** Bad requests to /v1/leases: each refused with a 4xx, none touches Postgres or S3. */
export const leaseRequest: fc.Arbitrary<BadRequest> = fc.oneof(
  leaseBody.map((b) => lease(`lease body ${json(b)}`, 400, "POST", "/v1/leases", admin, json(b))),
  fc
    .constantFrom("text/plain", "application/x-www-form-urlencoded", "application/xml")
    .map((t) =>
      lease(
        `lease content type ${t}`,
        415,
        "POST",
        "/v1/leases",
        { ...admin, "content-type": t },
        json({ resource: "fuzz/l", ttlMs: 1000 }),
      ),
    ),
  fc
    .constantFrom("{", "", "[1,")
    .map((b) => lease(`lease JSON ${json(b)}`, 400, "POST", "/v1/leases", { ...admin, "content-length": String(b.length) }, b)),
  fc.constant(
    lease("lease body too large", 413, "POST", "/v1/leases", admin, json({ resource: "fuzz/l", ttlMs: 1000, pad: "x".repeat(20_000) })),
  ),
  unauthorized.map((v) =>
    lease(
      `lease auth ${json(v)}`,
      401,
      "POST",
      "/v1/leases",
      v === undefined ? { "content-type": "application/json" } : { ...admin, authorization: v },
      json({ resource: "fuzz/l", ttlMs: 1000 }),
    ),
  ),
  segment.map((r) =>
    lease(
      "lease outside the key's scope",
      403,
      "POST",
      "/v1/leases",
      { ...admin, authorization: auth(KEYS.teamA) },
      json({ resource: `fuzz/${r}`, ttlMs: 1000 }),
    ),
  ),
  fc.constant(
    lease(
      "lease with a read-only key",
      403,
      "POST",
      "/v1/leases",
      { ...admin, authorization: auth(KEYS.reader) },
      json({ resource: "fuzz/l", ttlMs: 1000 }),
    ),
  ),
  leaseIdGarbage.map((id) =>
    lease(`extend lease id ${json(id)}`, 400, "POST", "/v1/leases/extend", admin, json({ leaseId: id, ttlMs: 1000 })),
  ),
  leaseIdGarbage.map((id) => lease(`release lease id ${json(id)}`, 400, "POST", "/v1/leases/release", admin, json({ leaseId: id }))),
  fc
    .constantFrom({}, { leaseId: 7 }, { leaseId: null }, { leaseId: "1.00000000000000000000000000000000.ZnV6eg", extra: 1 })
    .map((b) => lease(`release body ${json(b)}`, 400, "POST", "/v1/leases/release", admin, json(b))),
  // Well-formed lease ids sealed under a secret this gateway does not hold (as its signing key's id).
  fc
    .tuple(goodToken, fc.stringMatching(/^[0-9a-f]{32}$/), segment, fc.constantFrom("/v1/leases/extend", "/v1/leases/release"))
    .map(([t, v, r, path]) => {
      const leaseId = encodeLeaseId(
        { fences: [{ token: BigInt(t), resource: `fuzz/${r}` }], value: v, validUntil: Date.now() + 60_000 },
        { id: "current", secret: randomBytes(32) },
      );
      return lease(
        `${path} with a forged lease id`,
        403,
        "POST",
        path,
        admin,
        json(path.endsWith("extend") ? { leaseId, ttlMs: 1000 } : { leaseId }),
      );
    }),
  fc
    .constantFrom(["GET", "/v1/leases"], ["PUT", "/v1/leases"], ["GET", "/v1/leases/extend"], ["DELETE", "/v1/leases/release"])
    .map(([m, p]) => lease(`${m} ${p}`, 405, m as string, p as string, admin)),
);
